// Copyright fencegate authors.
//
// Every rule of the fencing contract (docs/fencing.md), against the real
// RocksDB fence store. Interleavings are forced with sync points. The
// store's own commit thread is tested in rocksdb_fence_store_test.cc.

#include "fencing/fencer.h"

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "fencegate/common/limits.h"
#include "fencegate/common/stale_token.h"
#include "fencegate/common/sync_point.h"
#include "fencing/clock.h"
#include "fencing/rocksdb_fence_store.h"
#include "tests/fencer_fixture.h"
#include "tests/fixtures.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

using ::fencegate::testing::FencerTest;
using ::fencegate::testing::StatusIs;
using ::testing::ElementsAre;

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
constexpr uint64_t kMaxSigned = std::numeric_limits<int64_t>::max();

// Rule 1.
TEST_F(FencerTest, StaleTokenIsRejectedAndNotApplied) {
  ASSERT_OK(Write("jobs", 5).status());
  absl::StatusOr<FenceDecision> stale = Write("jobs", 4);
  EXPECT_THAT(stale, StatusIs(absl::StatusCode::kFailedPrecondition));
  std::optional<StaleTokenInfo> info = GetStaleToken(stale.status());
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->domain, "jobs");
  EXPECT_EQ(info->token, 4u);
  EXPECT_EQ(info->highest_token, 5u);
  EXPECT_THAT(Applied(), ElementsAre(5));
  ASSERT_OK_AND_ASSIGN(state, fencer_->Get("jobs"));
  EXPECT_EQ(state.highest_token, 5u);
}

// Rule 2.
TEST_F(FencerTest, EqualTokenIsAcceptedWithoutAdvancing) {
  ASSERT_OK_AND_ASSIGN(first, Write("jobs", 7));
  EXPECT_TRUE(first.advanced);
  ASSERT_OK_AND_ASSIGN(second, Write("jobs", 7));
  EXPECT_FALSE(second.advanced);
  EXPECT_EQ(second.fence.highest_token, 7u);
  EXPECT_THAT(Applied(), ElementsAre(7, 7));
}

// Rule 3: the WAL holding the new token is synced, and the store reports
// the new token, before apply runs.
TEST_F(FencerTest, AdvanceIsSyncedBeforeApply) {
  ASSERT_OK(fencer_->Fence("jobs", 3).status());
  const int syncs_before = fs_->wal_syncs.load();
  bool durable_at_apply = false;
  uint64_t recorded_at_apply = 0;
  ASSERT_OK(fencer_
                ->Execute("jobs", 4,
                          [&] {
                            durable_at_apply =
                                fs_->wal_syncs.load() > syncs_before;
                            recorded_at_apply =
                                store_->Get("jobs")->highest_token;
                            return absl::OkStatus();
                          })
                .status());
  EXPECT_TRUE(durable_at_apply);
  EXPECT_EQ(recorded_at_apply, 4u);
}

// Rule 3, converse: an equal token writes nothing to the fence store.
TEST_F(FencerTest, EqualTokenDoesNotSync) {
  ASSERT_OK(Write("jobs", 3).status());
  const int syncs_before = fs_->wal_syncs.load();
  ASSERT_OK(Write("jobs", 3).status());
  EXPECT_EQ(fs_->wal_syncs.load(), syncs_before);
}

// Rule 4: a write that checked its token first is applied before a higher
// token's write, which waits for the domain's lock. Without the lock, the
// token-2 write would apply while token 1 waits here, giving [2, 1].
TEST_F(FencerTest, CheckRecordApplyAreSerializedPerDomain) {
  FENCEGATE_SKIP_WITHOUT_SYNC_POINTS();
  thread_local bool is_old_holder = false;
  absl::Notification old_checked, new_applied;
  SyncPoint::Get()->SetCallback("Fencer::Execute:AfterCheck", [&](void*) {
    if (!is_old_holder) return;
    old_checked.Notify();
    // Give a (broken) unserialized fencer every chance to apply token 2
    // now. A correct one cannot, so this wait always runs out.
    new_applied.WaitForNotificationWithTimeout(absl::Milliseconds(300));
  });
  std::thread old_holder([&] {
    is_old_holder = true;
    EXPECT_OK(Write("jobs", 1).status());
  });
  old_checked.WaitForNotification();
  ASSERT_OK(fencer_
                ->Execute("jobs", 2,
                          [&] {
                            absl::MutexLock lock(&mu_);
                            applied_.push_back(2);
                            new_applied.Notify();
                            return absl::OkStatus();
                          })
                .status());
  old_holder.join();
  EXPECT_THAT(Applied(), ElementsAre(1, 2));
}

// Rule 4: a write that arrived before the new token but had not been
// checked yet (in flight) is rejected once the new token is accepted.
TEST_F(FencerTest, InFlightOlderWriteIsRejectedAfterNewerToken) {
  FENCEGATE_SKIP_WITHOUT_SYNC_POINTS();
  ASSERT_OK(Write("jobs", 1).status());
  thread_local bool is_old_holder = false;
  absl::Notification old_in_flight, new_done;
  SyncPoint::Get()->SetCallback("Fencer::Execute:BeforeTurn", [&](void*) {
    if (!is_old_holder) return;
    old_in_flight.Notify();
    new_done.WaitForNotification();
  });
  absl::Status old_status;
  std::thread old_holder([&] {
    is_old_holder = true;
    old_status = Write("jobs", 1).status();
  });
  old_in_flight.WaitForNotification();
  ASSERT_OK(Write("jobs", 2).status());
  new_done.Notify();
  old_holder.join();
  EXPECT_THAT(old_status, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(Applied(), ElementsAre(1, 2));
}

// Rule 4: different domains do not wait for each other. Domain "a" blocks
// in apply until domain "b" has finished; if domains shared one lock, "b"
// could not finish and the wait would run out.
TEST_F(FencerTest, DifferentDomainsProceedInParallel) {
  absl::Notification a_applying, b_done;
  bool b_finished_while_a_applied = false;
  std::thread a([&] {
    EXPECT_OK(fencer_
                  ->Execute("a", 1,
                            [&] {
                              a_applying.Notify();
                              b_finished_while_a_applied =
                                  b_done.WaitForNotificationWithTimeout(
                                      absl::Seconds(20));
                              return absl::OkStatus();
                            })
                  .status());
  });
  a_applying.WaitForNotification();
  ASSERT_OK(Write("b", 1).status());
  b_done.Notify();
  a.join();
  EXPECT_TRUE(b_finished_while_a_applied);
}

// Rule 5.
TEST_F(FencerTest, FailedApplyKeepsAdvanceAndAllowsRetry) {
  ASSERT_OK(Write("jobs", 1).status());
  absl::StatusOr<FenceDecision> failed = fencer_->Execute(
      "jobs", 9, [] { return absl::UnavailableError("storage down"); });
  EXPECT_THAT(failed, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(Fencer::AdvancedBeforeError(failed.status()), 9u);
  EXPECT_EQ(
      Fencer::AdvancedBeforeError(
          fencer_
              ->Execute("jobs", 9,
                        [] { return absl::UnavailableError("still down"); })
              .status()),
      std::nullopt);  // Equal: nothing advanced.
  ASSERT_OK_AND_ASSIGN(state, fencer_->Get("jobs"));
  EXPECT_EQ(state.highest_token, 9u);
  EXPECT_THAT(Write("jobs", 8),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_OK(Write("jobs", 9).status());
  EXPECT_THAT(Applied(), ElementsAre(1, 9));
}

// ExecuteAsync, rule 1: a stale token is refused before apply is called,
// on the calling thread.
TEST_F(FencerTest, AsyncStaleTokenIsRejectedWithoutApply) {
  ASSERT_OK(Write("jobs", 5).status());
  bool applied = false;
  absl::StatusOr<FenceDecision> outcome;
  fencer_->ExecuteAsync(
      "jobs", 4, [&](Fencer::Applied) { applied = true; },
      [&](absl::StatusOr<FenceDecision> d) { outcome = std::move(d); });
  EXPECT_FALSE(applied);
  EXPECT_THAT(outcome, StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_TRUE(GetStaleToken(outcome.status()).has_value());
  EXPECT_EQ(GetStaleToken(outcome.status())->highest_token, 5u);
}

// ExecuteAsync, rule 3: the advance is synced and recorded before apply
// starts.
TEST_F(FencerTest, AsyncAdvanceIsSyncedBeforeApply) {
  ASSERT_OK(fencer_->Fence("jobs", 3).status());
  const int syncs_before = fs_->wal_syncs.load();
  bool durable_at_apply = false;
  uint64_t recorded_at_apply = 0;
  absl::StatusOr<FenceDecision> outcome;
  fencer_->ExecuteAsync(
      "jobs", 4,
      [&](Fencer::Applied applied) {
        durable_at_apply = fs_->wal_syncs.load() > syncs_before;
        recorded_at_apply = store_->Get("jobs")->highest_token;
        std::move(applied)(absl::OkStatus());
      },
      [&](absl::StatusOr<FenceDecision> d) { outcome = std::move(d); });
  EXPECT_TRUE(durable_at_apply);
  EXPECT_EQ(recorded_at_apply, 4u);
  ASSERT_OK(outcome.status());
  EXPECT_TRUE(outcome->advanced);
  EXPECT_EQ(outcome->fence.highest_token, 4u);
}

// ExecuteAsync, rule 4 across threads: the domain stays locked from the
// check until the apply calls back, from whichever thread it does. A write
// with a higher token waits; without the held lock it would apply while
// the first write's storage is still working, and see called_back false.
TEST_F(FencerTest, AsyncApplyHoldsTheDomainUntilItCallsBack) {
  Fencer::Applied pending;
  std::atomic<bool> called_back{false};
  absl::Notification done;
  std::thread::id done_thread;
  fencer_->ExecuteAsync(
      "jobs", 1,
      [&](Fencer::Applied applied) {
        absl::MutexLock lock(&mu_);
        applied_.push_back(1);
        pending = std::move(applied);  // The storage is still working.
      },
      [&](absl::StatusOr<FenceDecision> d) {
        EXPECT_OK(d.status());
        done_thread = std::this_thread::get_id();
        done.Notify();
      });
  absl::Notification newer_applied;
  bool newer_saw_callback = false;
  std::thread newer([&] {
    EXPECT_OK(fencer_
                  ->Execute("jobs", 2,
                            [&] {
                              newer_saw_callback = called_back.load();
                              absl::MutexLock lock(&mu_);
                              applied_.push_back(2);
                              newer_applied.Notify();
                              return absl::OkStatus();
                            })
                  .status());
  });
  // Give a (broken) fencer that released the lock early every chance to
  // apply token 2 now. A correct one cannot, so this wait always runs out.
  EXPECT_FALSE(
      newer_applied.WaitForNotificationWithTimeout(absl::Milliseconds(300)));
  std::thread::id storage_thread;
  std::thread storage([&] {
    storage_thread = std::this_thread::get_id();
    called_back = true;
    std::move(pending)(absl::OkStatus());
  });
  storage.join();
  newer.join();
  ASSERT_TRUE(done.HasBeenNotified());
  EXPECT_EQ(done_thread, storage_thread);
  EXPECT_TRUE(newer_saw_callback);
  EXPECT_THAT(Applied(), ElementsAre(1, 2));
}

// ExecuteAsync, rule 5: an apply that calls back with an error reports it;
// the advance stays.
TEST_F(FencerTest, AsyncFailedApplyKeepsAdvance) {
  ASSERT_OK(Write("jobs", 1).status());
  absl::StatusOr<FenceDecision> outcome;
  fencer_->ExecuteAsync(
      "jobs", 9,
      [](Fencer::Applied applied) {
        std::move(applied)(absl::UnavailableError("storage down"));
      },
      [&](absl::StatusOr<FenceDecision> d) { outcome = std::move(d); });
  EXPECT_THAT(outcome, StatusIs(absl::StatusCode::kUnavailable));
  ASSERT_OK_AND_ASSIGN(state, fencer_->Get("jobs"));
  EXPECT_EQ(state.highest_token, 9u);
  ASSERT_OK(Write("jobs", 9).status());  // The lock was released.
}

// Rule 6 (within a process lifetime of the store): reopening reads the
// same fences back.
TEST_F(FencerTest, FencesSurviveReopen) {
  ASSERT_OK(Write("jobs", 12).status());
  ASSERT_OK(Write("billing", 3).status());
  Open();
  ASSERT_OK_AND_ASSIGN(jobs, fencer_->Get("jobs"));
  EXPECT_EQ(jobs.highest_token, 12u);
  EXPECT_NE(jobs.advanced_at, absl::InfinitePast());
  EXPECT_THAT(Write("jobs", 11),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_OK_AND_ASSIGN(billing, fencer_->Get("billing"));
  EXPECT_EQ(billing.highest_token, 3u);
}

// Rule 7: edge values of the token.
TEST_F(FencerTest, TokenEdgeValues) {
  EXPECT_THAT(ValidateToken(0), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_OK(ValidateToken(1));
  EXPECT_OK(ValidateToken(kMax));

  ASSERT_OK(Write("signed", kMaxSigned).status());
  ASSERT_OK(Write("signed", kMaxSigned + 1).status());  // No signed wrap.
  EXPECT_THAT(Write("signed", kMaxSigned),
              StatusIs(absl::StatusCode::kFailedPrecondition));

  ASSERT_OK(Write("max", kMax).status());
  ASSERT_OK(Write("max", kMax).status());  // Equal stays accepted.
  EXPECT_THAT(Write("max", kMax - 1),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  Open();
  ASSERT_OK_AND_ASSIGN(max, fencer_->Get("max"));
  EXPECT_EQ(max.highest_token, kMax);
  ASSERT_OK_AND_ASSIGN(signed_state, fencer_->Get("signed"));
  EXPECT_EQ(signed_state.highest_token, kMaxSigned + 1);
}

// Rule 7: edge values of the domain.
TEST_F(FencerTest, DomainEdgeValues) {
  EXPECT_THAT(ValidateDomain(""), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_OK(ValidateDomain(std::string(kMaxDomainBytes, 'd')));
  EXPECT_THAT(ValidateDomain(std::string(kMaxDomainBytes + 1, 'd')),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ValidateDomain(std::string("a\0b", 3)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // Domains are exact byte strings: no case folding or prefix sharing.
  ASSERT_OK(Write("Jobs", 5).status());
  ASSERT_OK(Write("jobs", 1).status());
  ASSERT_OK(Write("Jobs/x", 1).status());
}

TEST_F(FencerTest, NeverFencedDomainReadsZero) {
  ASSERT_OK_AND_ASSIGN(state, fencer_->Get("nobody"));
  EXPECT_EQ(state.highest_token, 0u);
  EXPECT_EQ(state.advanced_at, absl::InfinitePast());
}

// A failed sync of the fence store leaves the fence state unknown: the
// process must stop rather than serve it.
TEST_F(FencerTest, FailedWalSyncIsFatal) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  testing::ScopedTmpdir child_dirs_inside(dir_.path());
  EXPECT_DEATH(
      {
        fs_->fail_wal_syncs = true;
        (void)fencer_->Fence("jobs", 1);
      },
      "cannot make fence of domain \"jobs\" durable");
}

// A full disk, or an I/O error, under the fence store's log stops the
// process with a line that says which fence could not be made durable.
TEST_F(FencerTest, FullDiskUnderTheFenceStoreIsFatal) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  testing::ScopedTmpdir child_dirs_inside(dir_.path());
  EXPECT_DEATH(
      {
        fs_->wal_appends_no_space = true;
        (void)fencer_->Fence("jobs", 1);
      },
      "FATAL fence store: cannot make fence of domain \"jobs\" durable: .*No "
      "space left on device");
}

TEST_F(FencerTest, IoErrorUnderTheFenceStoreIsFatal) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  testing::ScopedTmpdir child_dirs_inside(dir_.path());
  EXPECT_DEATH(
      {
        fs_->wal_appends_eio = true;
        (void)fencer_->Fence("jobs", 1);
      },
      "FATAL fence store: cannot make fence of domain \"jobs\" durable: .*"
      "Input/output error");
}

// A store that cannot be read refuses the write instead of applying it.
class UnreadableStore : public FenceStore {
 public:
  absl::StatusOr<FenceState> Get(absl::string_view) override {
    return absl::UnavailableError("disk gone");
  }
  absl::StatusOr<FenceState> Raise(absl::string_view, uint64_t,
                                   absl::Time) override {
    return absl::UnavailableError("disk gone");
  }
};

TEST(FencerStoreErrorTest, UnreadableStoreAppliesNothing) {
  UnreadableStore store;
  Fencer fencer(&store, Clock::Real());
  bool applied = false;
  EXPECT_THAT(fencer.Execute("jobs", 1,
                             [&] {
                               applied = true;
                               return absl::OkStatus();
                             }),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_FALSE(applied);
}

}  // namespace
}  // namespace fencegate
