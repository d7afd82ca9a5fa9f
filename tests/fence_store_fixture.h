// Copyright fencegate authors.
//
// A RocksDB fence store over a file system that counts WAL syncs, in a
// temporary directory, for the fencer and fence store tests; and a way to
// hold the store's commit thread.

#ifndef TESTS_FENCE_STORE_FIXTURE_H_
#define TESTS_FENCE_STORE_FIXTURE_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/synchronization/notification.h"
#include "fencegate/common/sync_point.h"
#include "fencing/fence_store.h"
#include "fencing/rocksdb_fence_store.h"
#include "gtest/gtest.h"
#include "rocksdb/env.h"
#include "tests/counting_fs.h"
#include "tests/test_util.h"

namespace fencegate::testing {

class FenceStoreFixture : public ::testing::Test {
 protected:
  void SetUp() override { OpenStore(); }
  void TearDown() override { SyncPoint::Get()->ClearAll(); }

  // Options of a store named `name` in the test's directory, over fs_.
  RocksDbFenceStoreOptions StoreOptions(const std::string& name = "fence") {
    RocksDbFenceStoreOptions options;
    options.path = dir_.path() + "/" + name;
    options.env = env_.get();
    return options;
  }

  // (Re)opens store_.
  void OpenStore() {
    store_.reset();
    auto store = OpenRocksDbFenceStore(StoreOptions());
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  // The fence store's commit thread, held before the write of its next
  // group until `release`; `committing` says it is held. Later groups pass.
  struct CommitHold {
    ~CommitHold() {
      SyncPoint::Get()->ClearCallback("RocksDbFenceStore::Commit:BeforeWrite");
    }
    absl::Notification committing, release;
    std::atomic<bool> held_once{false};
  };
  static void HoldFirstCommit(CommitHold* hold) {
    SyncPoint::Get()->SetCallback("RocksDbFenceStore::Commit:BeforeWrite",
                                  [hold](void*) {
                                    if (hold->held_once.exchange(true)) return;
                                    hold->committing.Notify();
                                    hold->release.WaitForNotification();
                                  });
  }

  TempDir dir_;
  std::shared_ptr<WalSyncCountingFs> fs_ =
      std::make_shared<WalSyncCountingFs>();
  std::unique_ptr<rocksdb::Env> env_ = NewEnvOver(fs_);
  std::unique_ptr<FenceStore> store_;
};

}  // namespace fencegate::testing

#endif  // TESTS_FENCE_STORE_FIXTURE_H_
