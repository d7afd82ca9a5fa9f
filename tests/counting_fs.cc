// Copyright fencegate authors.

#include "tests/counting_fs.h"

namespace fencegate::testing {
namespace {

class CountingWalFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  CountingWalFile(std::unique_ptr<rocksdb::FSWritableFile> file,
                  WalSyncCountingFs* fs)
      : rocksdb::FSWritableFileOwnerWrapper(std::move(file)), fs_(fs) {}

  rocksdb::IOStatus Append(const rocksdb::Slice& data,
                           const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* dbg) override {
    if (fs_->wal_appends_no_space)
      return rocksdb::IOStatus::NoSpace("injected: No space left on device");
    if (fs_->wal_appends_eio)
      return rocksdb::IOStatus::IOError("injected: Input/output error");
    return FSWritableFileOwnerWrapper::Append(data, options, dbg);
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& data,
                           const rocksdb::IOOptions& options,
                           const rocksdb::DataVerificationInfo& info,
                           rocksdb::IODebugContext* dbg) override {
    return Append(data, options, dbg);
  }
  rocksdb::IOStatus Sync(const rocksdb::IOOptions& options,
                         rocksdb::IODebugContext* dbg) override {
    if (fs_->fail_wal_syncs) return rocksdb::IOStatus::IOError("injected");
    rocksdb::IOStatus s = FSWritableFileOwnerWrapper::Sync(options, dbg);
    if (s.ok()) ++fs_->wal_syncs;
    return s;
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options,
                          rocksdb::IODebugContext* dbg) override {
    if (fs_->fail_wal_syncs) return rocksdb::IOStatus::IOError("injected");
    rocksdb::IOStatus s = FSWritableFileOwnerWrapper::Fsync(options, dbg);
    if (s.ok()) ++fs_->wal_syncs;
    return s;
  }

 private:
  WalSyncCountingFs* const fs_;
};

bool IsWal(const std::string& name) {
  return name.size() > 4 && name.compare(name.size() - 4, 4, ".log") == 0;
}

}  // namespace

rocksdb::IOStatus WalSyncCountingFs::NewWritableFile(
    const std::string& name, const rocksdb::FileOptions& options,
    std::unique_ptr<rocksdb::FSWritableFile>* result,
    rocksdb::IODebugContext* dbg) {
  rocksdb::IOStatus s = target()->NewWritableFile(name, options, result, dbg);
  if (s.ok() && IsWal(name)) {
    *result = std::make_unique<CountingWalFile>(std::move(*result), this);
  }
  return s;
}

std::unique_ptr<rocksdb::Env> NewEnvOver(
    std::shared_ptr<WalSyncCountingFs> fs) {
  return rocksdb::NewCompositeEnv(fs);
}

}  // namespace fencegate::testing
