// Copyright fencegate authors.

#include "storage_adapters/file/file_commit_thread.h"

#include <utility>
#include <vector>

#include "fencegate/common/sync_point.h"
#include "fencegate/common/thread_name.h"

namespace fencegate {

FileCommitThread::FileCommitThread(file_io::Fd sync_fd, std::string root,
                                   std::function<void(size_t)> on_group)
    : sync_fd_(std::move(sync_fd)),
      root_(std::move(root)),
      on_group_(std::move(on_group)),
      thread_([this] {
        NameThisThread("file-commit");
        Run();
      }) {}

FileCommitThread::~FileCommitThread() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void FileCommitThread::Add(std::unique_ptr<FileWrite> write) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(write));
}

FileCommitThread::Counts FileCommitThread::counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

void FileCommitThread::Run() {
  std::vector<std::unique_ptr<FileWrite>> group;
  std::vector<FileWrite*> writes;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // Stopping, and nothing is left.
      while (!queue_.empty() && group.size() < kMaxGroup) {
        group.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      ++counts_.groups;
      counts_.writes += group.size();
    }
    FENCEGATE_SYNC_POINT("FileCommitThread::Run:BeforeGroup");
    for (const std::unique_ptr<FileWrite>& w : group) writes.push_back(w.get());
    CommitFileWrites(sync_fd_.get(), root_, writes);
    writes.clear();
    if (on_group_) on_group_(group.size());
    for (std::unique_ptr<FileWrite>& w : group) {
      absl::Status status = std::move(w->status);
      auto done = std::move(w->done);
      w.reset();  // Releases its locks and removes what it left.
      std::move(done)(std::move(status));
    }
    group.clear();
  }
}

}  // namespace fencegate
