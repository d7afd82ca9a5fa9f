// Copyright fencegate authors.
//
// A fault-injecting RocksDB FileSystem wrapper: counts syncs of the
// write-ahead log and can make its syncs or appends fail (EIO, or a full
// disk): proves that a fence raise is synced before it is reported, and that
// a raise that cannot be made durable stops the process.

#ifndef TESTS_COUNTING_FS_H_
#define TESTS_COUNTING_FS_H_

#include <atomic>
#include <memory>
#include <string>

#include "rocksdb/env.h"
#include "rocksdb/file_system.h"

namespace fencegate::testing {

class WalSyncCountingFs : public rocksdb::FileSystemWrapper {
 public:
  WalSyncCountingFs()
      : rocksdb::FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  const char* Name() const override { return "WalSyncCountingFs"; }

  rocksdb::IOStatus NewWritableFile(
      const std::string& name, const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSWritableFile>* result,
      rocksdb::IODebugContext* dbg) override;

  // Successful Sync/Fsync calls on *.log files.
  std::atomic<int> wal_syncs{0};
  // When set, WAL syncs fail with an I/O error.
  std::atomic<bool> fail_wal_syncs{false};
  // When set, WAL appends fail: with ENOSPC (a full disk), or with EIO.
  std::atomic<bool> wal_appends_no_space{false};
  std::atomic<bool> wal_appends_eio{false};
};

// An Env over `fs` for RocksDbFenceStoreOptions::env.
std::unique_ptr<rocksdb::Env> NewEnvOver(std::shared_ptr<WalSyncCountingFs> fs);

}  // namespace fencegate::testing

#endif  // TESTS_COUNTING_FS_H_
