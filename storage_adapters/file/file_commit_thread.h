// Copyright fencegate authors.
//
// FileCommitThread: one thread of the file adapter's own that commits the
// prepared writes queued to it in groups (CommitFileWrites, file_commit.h),
// so that concurrent writes to a root share the file system's syncs and no
// I/O thread waits for a sync.
//
// A group is what has queued by the time the previous group ends, up to
// kMaxGroup writes: no write waits for others to arrive. Each write's locks
// (its fence record's, an append's) are released before it is told its
// outcome, on the commit thread.
//
// Thread safety: Add() is safe for concurrent use.

#ifndef STORAGE_ADAPTERS_FILE_FILE_COMMIT_THREAD_H_
#define STORAGE_ADAPTERS_FILE_FILE_COMMIT_THREAD_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "storage_adapters/file/file_commit.h"
#include "storage_adapters/file/file_io.h"

namespace fencegate {

class FileCommitThread {
 public:
  static constexpr size_t kMaxGroup = 1024;

  // Commits beneath `root_fd` (which must stay open while this object
  // lives); `root` names it in messages. `on_group`, if set, is told the
  // size of each group, on the commit thread; it must not block.
  // `sync_fd`: a sync handle of the root (file_io::OpenSyncHandle) that
  // only this thread uses.
  FileCommitThread(file_io::Fd sync_fd, std::string root,
                   std::function<void(size_t writes)> on_group = nullptr);
  // Commits every write queued, then joins the thread.
  ~FileCommitThread();
  FileCommitThread(const FileCommitThread&) = delete;
  FileCommitThread& operator=(const FileCommitThread&) = delete;

  // Queues `write` (its change prepared, groupable(), status OK, `done`
  // set); `done` runs once, on the commit thread. Never blocks.
  void Add(std::unique_ptr<FileWrite> write);

  // Groups committed so far, and the writes in them.
  struct Counts {
    uint64_t groups = 0;
    uint64_t writes = 0;
  };
  Counts counts() const;

 private:
  void Run();

  const file_io::Fd sync_fd_;
  const std::string root_;
  const std::function<void(size_t)> on_group_;
  mutable absl::Mutex mu_;
  std::deque<std::unique_ptr<FileWrite>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Counts counts_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // Last: starts after everything it uses.
};

}  // namespace fencegate

#endif  // STORAGE_ADAPTERS_FILE_FILE_COMMIT_THREAD_H_
