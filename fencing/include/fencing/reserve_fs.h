// Copyright fencegate authors.
//
// ReserveFs: a RocksDB FileSystem that keeps a few file descriptors in
// reserve for the fence store. Every client connection costs the process a
// descriptor; once clients have taken them all, RocksDB could not open its
// next write-ahead log or table file, its write would fail, and a fence
// store whose write fails must stop the process. ReserveFs holds `reserve`
// descriptors (of /dev/null) from the start; when opening a file fails for
// want of descriptors (EMFILE, ENFILE), it closes one of them and tries
// again, and it takes them back as descriptors free up.
//
// Thread safety: safe for concurrent use, as RocksDB requires.

#ifndef FENCING_RESERVE_FS_H_
#define FENCING_RESERVE_FS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "rocksdb/file_system.h"

namespace fencegate {

class ReserveFs final : public rocksdb::FileSystemWrapper {
 public:
  ReserveFs(std::shared_ptr<rocksdb::FileSystem> base, int reserve);
  ~ReserveFs() override;
  const char* Name() const override { return "ReserveFs"; }

  // Descriptors held in reserve now.
  int reserved() const;

  rocksdb::IOStatus NewWritableFile(
      const std::string& name, const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSWritableFile>* result,
      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReopenWritableFile(
      const std::string& name, const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSWritableFile>* result,
      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReuseWritableFile(
      const std::string& name, const std::string& old_name,
      const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSWritableFile>* result,
      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewSequentialFile(
      const std::string& name, const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSSequentialFile>* result,
      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewRandomAccessFile(
      const std::string& name, const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSRandomAccessFile>* result,
      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewDirectory(const std::string& name,
                                 const rocksdb::IOOptions& options,
                                 std::unique_ptr<rocksdb::FSDirectory>* result,
                                 rocksdb::IODebugContext* dbg) override;

 private:
  // Runs `open` until it succeeds, fails for another reason than a lack of
  // descriptors, or the reserve is empty; then refills the reserve.
  template <typename Open>
  rocksdb::IOStatus WithReserve(Open open);
  // Closes one reserved descriptor; false if none is left.
  bool Release();
  // Opens descriptors until `target_` are held or none can be had.
  void Refill();

  const int target_;
  mutable absl::Mutex mu_;
  std::vector<int> fds_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fencegate

#endif  // FENCING_RESERVE_FS_H_
