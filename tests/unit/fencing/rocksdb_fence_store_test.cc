// Copyright fencegate authors.
//
// The RocksDB fence store's commit thread: rises queued while it syncs
// share one synced batch, are decided in queue order (lease grants too),
// are reported only once durable, and are all reported when the store
// closes. Commits are held with a sync point to make groups.

#include "fencing/rocksdb_fence_store.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "fencegate/common/sync_point.h"
#include "tests/fence_store_fixture.h"
#include "tests/fixtures.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

using ::fencegate::testing::StatusIs;
using ::testing::ElementsAre;

class RocksDbFenceStoreTest : public testing::FenceStoreFixture {};

// The store's commit thread: rises queued while it is busy share one
// synced write. The thread is held in its first commit while 20 more
// domains queue; all 20 then go out in one sync (one per rise without
// grouping).
TEST_F(RocksDbFenceStoreTest, RisesQueuedDuringACommitShareOneSync) {
  FENCEGATE_SKIP_WITHOUT_SYNC_POINTS();
  CommitHold hold;
  HoldFirstCommit(&hold);
  const int syncs_before = fs_->wal_syncs.load();
  std::atomic<int> reported{0};
  auto count = [&](absl::StatusOr<FenceState> raised) {
    EXPECT_OK(raised.status());
    reported.fetch_add(1);
  };
  store_->RaiseAsync("first", 1, absl::Now(), count);
  hold.committing.WaitForNotification();
  for (int i = 0; i < 20; ++i) {
    store_->RaiseAsync(absl::StrCat("d", i), 10 + i, absl::Now(), count);
  }
  EXPECT_EQ(reported.load(), 0);  // Nothing is reported before its sync.
  hold.release.Notify();
  ASSERT_TRUE(testing::WaitFor([&] { return reported.load() == 21; }));
  EXPECT_EQ(fs_->wal_syncs.load() - syncs_before, 2);
  OpenStore();
  for (int i = 0; i < 20; ++i) {
    ASSERT_OK_AND_ASSIGN(state, store_->Get(absl::StrCat("d", i)));
    EXPECT_EQ(state.highest_token, 10u + i);
  }
}

// Rises of one domain in one group are decided in queue order, each
// against the ones before it: a lower one changes nothing.
TEST_F(RocksDbFenceStoreTest, RisesOfOneDomainInOneGroupKeepTheHighest) {
  FENCEGATE_SKIP_WITHOUT_SYNC_POINTS();
  CommitHold hold;
  HoldFirstCommit(&hold);
  absl::Mutex mu;
  std::vector<uint64_t> results;
  auto record = [&](absl::StatusOr<FenceState> raised) {
    ASSERT_OK(raised.status());
    absl::MutexLock lock(&mu);
    results.push_back(raised->highest_token);
  };
  store_->RaiseAsync("other", 1, absl::Now(), record);
  hold.committing.WaitForNotification();
  for (uint64_t token : {7, 5, 9, 9, 8}) {
    store_->RaiseAsync("jobs", token, absl::Now(), record);
  }
  hold.release.Notify();
  ASSERT_TRUE(testing::WaitFor([&] {
    absl::MutexLock lock(&mu);
    return results.size() == 6;
  }));
  EXPECT_THAT(results, ElementsAre(1, 7, 7, 9, 9, 9));
  OpenStore();
  ASSERT_OK_AND_ASSIGN(state, store_->Get("jobs"));
  EXPECT_EQ(state.highest_token, 9u);
}

// Rises of one domain over many groups: a reopened store (the WAL
// replayed into a new memtable) reads back the last one.
TEST_F(RocksDbFenceStoreTest, ManyRisesOfOneDomainReadBackAfterReopen) {
  for (uint64_t round = 1; round <= 2; ++round) {
    for (uint64_t token = 1; token <= 100; ++token) {
      ASSERT_OK(store_->Raise("jobs", (round - 1) * 100 + token, absl::Now())
                    .status());
      ASSERT_OK(
          store_->Raise(absl::StrCat("d", token), round, absl::Now()).status());
    }
    OpenStore();
    ASSERT_OK_AND_ASSIGN(jobs, store_->Get("jobs"));
    EXPECT_EQ(jobs.highest_token, round * 100);
    ASSERT_OK_AND_ASSIGN(d7, store_->Get("d7"));
    EXPECT_EQ(d7.highest_token, round);
  }
}

// The in-memory cache is bounded: with room for 10 fences, 1000 domains
// still read back right, and most are not cached.
TEST_F(RocksDbFenceStoreTest, CacheIsBoundedAndFencesReadBackRight) {
  RocksDbFenceStoreOptions options = StoreOptions("small");
  options.max_cached_domains = 10;
  ASSERT_OK_AND_ASSIGN(small, OpenRocksDbFenceStore(options));
  for (int d = 0; d < 1000; ++d) {
    ASSERT_OK(small->Raise(absl::StrCat("d", d), d + 1, absl::Now()).status());
  }
  int cached = 0;
  for (int d = 0; d < 1000; ++d) {
    if (small->GetCached(absl::StrCat("d", d)).has_value()) ++cached;
    ASSERT_OK_AND_ASSIGN(state, small->Get(absl::StrCat("d", d)));
    EXPECT_EQ(state.highest_token, static_cast<uint64_t>(d + 1)) << d;
  }
  EXPECT_LE(cached, 10);
  // A stale rise is still refused for a domain that was dropped.
  ASSERT_OK_AND_ASSIGN(kept, small->Raise("d0", 1, absl::Now()));
  EXPECT_EQ(kept.highest_token, 1u);
  ASSERT_OK_AND_ASSIGN(d5, small->Raise("d5", 2, absl::Now()));
  EXPECT_EQ(d5.highest_token, 6u);
}

// A read that raced a rise must not put the older fence back in the cache
// after the newer one was dropped from it: the fast path would then accept
// a stale token. A Get of "d" is held after reading token 1 from RocksDB;
// meanwhile "d" rises to 5 and the cache drops it (other domains fill it).
TEST_F(RocksDbFenceStoreTest, AReadRacingARiseNeverCachesTheOlderFence) {
  FENCEGATE_SKIP_WITHOUT_SYNC_POINTS();
  RocksDbFenceStoreOptions options = StoreOptions("race");
  options.max_cached_domains = 4;
  ASSERT_OK_AND_ASSIGN(store, OpenRocksDbFenceStore(options));
  ASSERT_OK(store->Raise("d", 1, absl::Now()).status());
  for (int i = 0; i < 8; ++i) {  // Drops "d" from the cache.
    ASSERT_OK(store->Raise(absl::StrCat("x", i), 1, absl::Now()).status());
  }
  ASSERT_FALSE(store->GetCached("d").has_value());
  absl::Notification read, release;
  std::atomic<bool> once{false};
  SyncPoint::Get()->SetCallback("RocksDbFenceStore::Get:AfterRead", [&](void*) {
    if (once.exchange(true)) return;
    read.Notify();
    release.WaitForNotification();
  });
  absl::StatusOr<FenceState> raced;
  std::thread reader([&] { raced = store->Get("d"); });
  read.WaitForNotification();
  ASSERT_OK(store->Raise("d", 5, absl::Now()).status());
  for (int i = 0; i < 8; ++i) {
    ASSERT_OK(store->Raise(absl::StrCat("y", i), 1, absl::Now()).status());
  }
  release.Notify();
  reader.join();
  SyncPoint::Get()->ClearAll();
  ASSERT_OK(raced.status());
  std::optional<FenceState> cached = store->GetCached("d");
  if (cached.has_value()) {
    EXPECT_EQ(cached->highest_token, 5u);
  }
  ASSERT_OK_AND_ASSIGN(now, store->Get("d"));
  EXPECT_EQ(now.highest_token, 5u);
}

// Clients' connections may take every file descriptor the process can
// have. The store must still open its next files -- a new write-ahead log
// and a table each time the memtable fills -- from its reserve: a failed
// write would stop the process. Here the test itself takes every free
// descriptor before the rises that fill the memtable several times.
TEST_F(RocksDbFenceStoreTest, TheStoreOpensItsFilesWhenDescriptorsRunOut) {
  RocksDbFenceStoreOptions options = StoreOptions("reserve");
  options.write_buffer_bytes = 64 << 10;  // A new log and table every 64 KiB.
  if (testing::kUndefinedSanitizer) {
    GTEST_SKIP() << "UBSan's type checks need descriptors this test takes";
  }
  if (testing::kThreadSanitizer) {
    // Out of descriptors, TSan cannot start its symbolizer; and RocksDB's
    // flush thread hands its buffers to the writer through its own atomics,
    // which TSan cannot see (Debian's RocksDB is uninstrumented), so it
    // reported RocksDB's own memcpy/memcmp as a race here, once in many
    // runs. The test is about descriptors, not threads: it runs in the
    // suite and ASan stages.
    GTEST_SKIP() << "descriptor exhaustion is checked outside TSan";
  }
  ASSERT_OK_AND_ASSIGN(store, OpenRocksDbFenceStore(options));
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = std::min<rlim_t>(saved.rlim_cur, 1024);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> taken;
  while (true) {
    const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) break;
    taken.push_back(fd);
  }
  ASSERT_EQ(errno, EMFILE);
  for (int d = 0; d < 400; ++d) {
    absl::StatusOr<FenceState> raised =
        store->Raise(absl::StrCat(std::string(500, 'n'), d), 7, absl::Now());
    ASSERT_TRUE(raised.ok()) << d << ": " << raised.status();
  }
  for (int fd : taken) ::close(fd);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  store.reset();
  ASSERT_OK_AND_ASSIGN(reopened, OpenRocksDbFenceStore(options));
  for (int d = 0; d < 400; d += 57) {
    ASSERT_OK_AND_ASSIGN(state,
                         reopened->Get(absl::StrCat(std::string(500, 'n'), d)));
    EXPECT_EQ(state.highest_token, 7u) << d;
  }
}

// A lease grant is decided in queue order with the rises of its group: one
// whose token is not above a rise queued before it is refused, one above
// it is granted, with the fence and the lease in the same synced batch.
TEST_F(RocksDbFenceStoreTest, LeaseGrantsAreDecidedInQueueOrderWithRises) {
  FENCEGATE_SKIP_WITHOUT_SYNC_POINTS();
  const RocksDbFenceStoreOptions options = StoreOptions("leases");
  ASSERT_OK_AND_ASSIGN(store, OpenRocksDbStore(options));
  CommitHold hold;
  std::atomic<int> queued{0};
  HoldFirstCommit(&hold);
  SyncPoint::Get()->SetCallback("RocksDbFenceStore::Enqueue:Queued",
                                [&](void*) { queued.fetch_add(1); });
  absl::Notification first_done;
  store->RaiseAsync("other", 1, absl::Now(),
                    [&](absl::StatusOr<FenceState>) { first_done.Notify(); });
  hold.committing.WaitForNotification();
  absl::Notification raised;
  store->RaiseAsync("jobs", 7, absl::Now(), [&](absl::StatusOr<FenceState> r) {
    EXPECT_OK(r.status());
    raised.Notify();
  });
  auto lease = [](uint64_t token) {
    return LeaseRecord{"jobs",           absl::StrCat("lease-", token),
                       "worker",         token,
                       absl::Seconds(5), absl::Now() + absl::Seconds(5)};
  };
  absl::Status low, high;
  std::thread low_grant(
      [&] { low = store->GrantLease(lease(6), absl::Now()); });
  EXPECT_TRUE(testing::WaitFor([&] { return queued.load() == 3; }));
  std::thread high_grant(
      [&] { high = store->GrantLease(lease(8), absl::Now()); });
  EXPECT_TRUE(testing::WaitFor([&] { return queued.load() == 4; }));
  hold.release.Notify();
  low_grant.join();
  high_grant.join();
  first_done.WaitForNotification();
  raised.WaitForNotification();
  EXPECT_THAT(low, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_OK(high);
  store.reset();
  ASSERT_OK_AND_ASSIGN(reopened, OpenRocksDbStore(options));
  ASSERT_OK_AND_ASSIGN(fence, reopened->Get("jobs"));
  EXPECT_EQ(fence.highest_token, 8u);
  ASSERT_OK_AND_ASSIGN(leases, reopened->LoadLeases());
  ASSERT_EQ(leases.size(), 1u);
  EXPECT_EQ(leases[0].token, 8u);
  EXPECT_EQ(leases[0].lease_id, "lease-8");
}

// Closing the store reports every queued rise, made durable first.
TEST_F(RocksDbFenceStoreTest, ClosingReportsQueuedRises) {
  std::atomic<int> reported{0};
  for (int i = 0; i < 50; ++i) {
    store_->RaiseAsync(absl::StrCat("d", i), 1 + i, absl::Now(),
                       [&](absl::StatusOr<FenceState> raised) {
                         EXPECT_OK(raised.status());
                         reported.fetch_add(1);
                       });
  }
  store_.reset();
  EXPECT_EQ(reported.load(), 50);
  OpenStore();
  for (int i = 0; i < 50; ++i) {
    ASSERT_OK_AND_ASSIGN(state, store_->Get(absl::StrCat("d", i)));
    EXPECT_EQ(state.highest_token, 1u + i);
  }
}

// A rise's callback runs on the commit thread; waiting there for another
// rise could never end, so it aborts with a message instead.
TEST_F(RocksDbFenceStoreTest, CallbackThatWaitsForARiseIsFatal) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  testing::ScopedTmpdir child_dirs_inside(dir_.path());
  EXPECT_DEATH(
      {
        store_->RaiseAsync("jobs", 1, absl::Now(),
                           [&](absl::StatusOr<FenceState>) {
                             (void)store_->Raise("jobs", 2, absl::Now());
                           });
        absl::SleepFor(absl::Seconds(10));
      },
      "waited for another rise on the commit thread");
}

}  // namespace
}  // namespace fencegate
