// Copyright fencegate authors.
//
// Fencer::TryExecuteAsync, the fast path that decides on the caller's
// thread: it decides only what needs no waiting, and keeps rules 3 and 4
// like ExecuteAsync (fencing/fencer.h).

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "fencegate/common/stale_token.h"
#include "fencegate/common/sync_point.h"
#include "fencing/fencer.h"
#include "tests/fencer_fixture.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

using ::fencegate::testing::FencerTest;
using ::fencegate::testing::StatusIs;
using ::testing::ElementsAre;

// A FenceStore over another that raises only synchronously: RaiseAsync
// is the default, which waits for the sync on the caller's thread.
class SyncRaiseStore : public FenceStore {
 public:
  explicit SyncRaiseStore(FenceStore* base) : base_(base) {}
  absl::StatusOr<FenceState> Get(absl::string_view domain) override {
    return base_->Get(domain);
  }
  std::optional<FenceState> GetCached(absl::string_view domain) override {
    return base_->GetCached(domain);
  }
  absl::StatusOr<FenceState> Raise(absl::string_view domain, uint64_t token,
                                   absl::Time at) override {
    return base_->Raise(domain, token, at);
  }

 private:
  FenceStore* const base_;
};

// TryExecuteAsync decides only what needs no waiting: an equal token read
// from memory is applied, a stale one refused; an unread domain or a held
// domain is left to ExecuteAsync, with nothing called, and so is an
// advance when the store cannot queue it.
TEST_F(FencerTest, TryExecuteAsyncDecidesOnlyWithoutBlocking) {
  int applies = 0;
  std::vector<absl::StatusOr<FenceDecision>> outcomes;
  Fencer::AsyncApply apply;
  Fencer::DecisionCallback done;
  auto arm = [&] {
    apply = [&](Fencer::Applied applied) {
      ++applies;
      std::move(applied)(absl::OkStatus());
    };
    done = [&](absl::StatusOr<FenceDecision> d) {
      outcomes.push_back(std::move(d));
    };
  };
  arm();
  // Never fenced: not in memory, and token 1 would advance it.
  EXPECT_FALSE(fencer_->TryExecuteAsync("jobs", 1, apply, done));
  ASSERT_OK(Write("jobs", 5).status());
  SyncRaiseStore sync_store(store_.get());
  Fencer sync_fencer(&sync_store, Clock::Real());
  EXPECT_FALSE(sync_store.RaiseAsyncNeverBlocks());
  EXPECT_FALSE(
      sync_fencer.TryExecuteAsync("jobs", 6, apply, done));  // Advance.
  EXPECT_EQ(applies, 0);
  EXPECT_TRUE(outcomes.empty());
  ASSERT_OK_AND_ASSIGN(state, fencer_->Get("jobs"));
  EXPECT_EQ(state.highest_token, 5u);

  EXPECT_TRUE(fencer_->TryExecuteAsync("jobs", 5, apply, done));  // Equal.
  arm();
  EXPECT_TRUE(fencer_->TryExecuteAsync("jobs", 4, apply, done));  // Stale.
  EXPECT_EQ(applies, 1);
  ASSERT_EQ(outcomes.size(), 2u);
  ASSERT_OK(outcomes[0].status());
  EXPECT_FALSE(outcomes[0]->advanced);
  EXPECT_EQ(outcomes[0]->fence.highest_token, 5u);
  EXPECT_THAT(outcomes[1], StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_TRUE(GetStaleToken(outcomes[1].status()).has_value());
  EXPECT_EQ(GetStaleToken(outcomes[1].status())->highest_token, 5u);

  // While an apply of the domain is in flight, the domain is not free.
  Fencer::Applied pending;
  fencer_->ExecuteAsync(
      "jobs", 5, [&](Fencer::Applied applied) { pending = std::move(applied); },
      [&](absl::StatusOr<FenceDecision> d) { outcomes.push_back(d); });
  arm();
  EXPECT_FALSE(fencer_->TryExecuteAsync("jobs", 5, apply, done));
  EXPECT_FALSE(fencer_->TryExecuteAsync("jobs", 4, apply, done));
  EXPECT_EQ(outcomes.size(), 2u);
  std::move(pending)(absl::OkStatus());
  ASSERT_EQ(outcomes.size(), 3u);
  EXPECT_TRUE(fencer_->TryExecuteAsync("jobs", 5, apply, done));
  EXPECT_EQ(applies, 2);
  EXPECT_EQ(outcomes.size(), 4u);
}

// TryExecuteAsync holds the domain, like ExecuteAsync, until its apply
// calls back: a higher token's write waits for it.
TEST_F(FencerTest, TryExecuteAsyncHoldsTheDomainUntilItCallsBack) {
  ASSERT_OK(Write("jobs", 1).status());
  Fencer::Applied pending;
  Fencer::AsyncApply apply = [&](Fencer::Applied applied) {
    pending = std::move(applied);
  };
  absl::Notification done_called;
  Fencer::DecisionCallback done = [&](absl::StatusOr<FenceDecision> d) {
    EXPECT_OK(d.status());
    done_called.Notify();
  };
  ASSERT_TRUE(fencer_->TryExecuteAsync("jobs", 1, apply, done));
  std::atomic<bool> called_back{false};
  bool newer_saw_callback = false;
  absl::Notification newer_applied;
  std::thread newer([&] {
    EXPECT_OK(fencer_
                  ->Execute("jobs", 2,
                            [&] {
                              newer_saw_callback = called_back.load();
                              newer_applied.Notify();
                              return absl::OkStatus();
                            })
                  .status());
  });
  // A correct fencer cannot apply token 2 now: this wait always runs out.
  EXPECT_FALSE(
      newer_applied.WaitForNotificationWithTimeout(absl::Milliseconds(300)));
  called_back = true;
  std::move(pending)(absl::OkStatus());
  newer.join();
  EXPECT_TRUE(done_called.HasBeenNotified());
  EXPECT_TRUE(newer_saw_callback);
}

// TryExecuteAsync, rule 3: an advance is queued to the store, and apply
// runs on the store's thread once the advance is synced and recorded.
TEST_F(FencerTest, TryExecuteAsyncAdvanceIsSyncedBeforeApply) {
  ASSERT_OK(fencer_->Fence("jobs", 3).status());
  ASSERT_TRUE(store_->RaiseAsyncNeverBlocks());
  const int syncs_before = fs_->wal_syncs.load();
  bool durable_at_apply = false;
  uint64_t recorded_at_apply = 0;
  std::thread::id apply_thread;
  Fencer::AsyncApply apply = [&](Fencer::Applied applied) {
    durable_at_apply = fs_->wal_syncs.load() > syncs_before;
    recorded_at_apply = store_->Get("jobs")->highest_token;
    apply_thread = std::this_thread::get_id();
    std::move(applied)(absl::OkStatus());
  };
  absl::StatusOr<FenceDecision> outcome;
  absl::Notification done_called;
  Fencer::DecisionCallback done = [&](absl::StatusOr<FenceDecision> d) {
    outcome = std::move(d);
    done_called.Notify();
  };
  ASSERT_TRUE(fencer_->TryExecuteAsync("jobs", 4, apply, done));
  done_called.WaitForNotification();
  EXPECT_TRUE(durable_at_apply);
  EXPECT_EQ(recorded_at_apply, 4u);
  EXPECT_NE(apply_thread, std::this_thread::get_id());
  ASSERT_OK(outcome.status());
  EXPECT_TRUE(outcome->advanced);
  EXPECT_EQ(outcome->fence.highest_token, 4u);
}

// TryExecuteAsync, rule 4: a queued advance holds the domain until it is
// durable and applied. The store's commit is held before its write; a
// token-1 write that arrives meanwhile waits, then is refused as stale.
// Had the domain been free while the advance was pending, token 1 would
// have been accepted against the old fence and applied first.
TEST_F(FencerTest, TryExecuteAsyncAdvanceHoldsTheDomainUntilDurable) {
  FENCEGATE_SKIP_WITHOUT_SYNC_POINTS();
  ASSERT_OK(Write("jobs", 1).status());
  CommitHold hold;
  HoldFirstCommit(&hold);
  Fencer::AsyncApply apply = [&](Fencer::Applied applied) {
    {
      absl::MutexLock lock(&mu_);
      applied_.push_back(2);
    }
    std::move(applied)(absl::OkStatus());
  };
  absl::Notification done_called;
  Fencer::DecisionCallback done = [&](absl::StatusOr<FenceDecision> d) {
    EXPECT_OK(d.status());
    done_called.Notify();
  };
  ASSERT_TRUE(fencer_->TryExecuteAsync("jobs", 2, apply, done));
  hold.committing.WaitForNotification();
  Fencer::AsyncApply other_apply = [](Fencer::Applied) {};
  Fencer::DecisionCallback other_done = [](absl::StatusOr<FenceDecision>) {};
  EXPECT_FALSE(fencer_->TryExecuteAsync("jobs", 1, other_apply, other_done));
  absl::Notification late_decided;
  absl::Status late_status;
  std::thread late([&] {
    late_status = Write("jobs", 1).status();
    late_decided.Notify();
  });
  // A correct fencer cannot decide token 1 now: this wait always runs out.
  EXPECT_FALSE(
      late_decided.WaitForNotificationWithTimeout(absl::Milliseconds(300)));
  hold.release.Notify();
  late.join();
  done_called.WaitForNotification();
  EXPECT_THAT(late_status, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(Applied(), ElementsAre(1, 2));
}

// Submit, the one way both doors write through the fence: decided on the
// calling thread only when the door says its apply never blocks (and the
// Fencer can decide without blocking); otherwise the work goes to the
// Runner, where ExecuteAsync runs it, cancellation asked.
TEST_F(FencerTest, SubmitDecidesHereOnlyForAnApplyThatNeverBlocks) {
  ASSERT_OK(Write("jobs", 5).status());
  std::vector<absl::AnyInvocable<void() &&>> posted;
  Fencer fencer(store_.get(), Clock::Real(), nullptr,
                [&](absl::AnyInvocable<void() &&> work) {
                  posted.push_back(std::move(work));
                });
  int applies = 0;
  std::vector<absl::StatusOr<FenceDecision>> outcomes;
  auto apply = [&] {
    return [&](Fencer::Applied applied) {
      ++applies;
      std::move(applied)(absl::OkStatus());
    };
  };
  auto done = [&] {
    return [&](absl::StatusOr<FenceDecision> d) {
      outcomes.push_back(std::move(d));
    };
  };
  // Read once, so that the store answers from memory.
  ASSERT_OK(fencer.Get("jobs").status());

  ExecuteAsyncOptions never_blocks;
  never_blocks.apply_never_blocks = true;
  fencer.Submit("jobs", 5, apply(), done(), never_blocks);
  EXPECT_TRUE(posted.empty());
  EXPECT_EQ(applies, 1);
  ASSERT_EQ(outcomes.size(), 1u);
  ASSERT_OK(outcomes[0].status());

  // The same write from a door whose apply may block: to the Runner.
  bool asked = false;
  ExecuteAsyncOptions may_block;
  may_block.cancelled = [&] {
    asked = true;
    return false;
  };
  fencer.Submit("jobs", 5, apply(), done(), may_block);
  EXPECT_EQ(applies, 1);
  EXPECT_EQ(outcomes.size(), 1u);
  ASSERT_EQ(posted.size(), 1u);
  std::move(posted[0])();
  EXPECT_TRUE(asked);
  EXPECT_EQ(applies, 2);
  ASSERT_EQ(outcomes.size(), 2u);
  ASSERT_OK(outcomes[1].status());

  // A stale token, never-blocking: refused here, nothing applied.
  fencer.Submit("jobs", 4, apply(), done(), never_blocks);
  EXPECT_EQ(posted.size(), 1u);
  EXPECT_EQ(applies, 2);
  ASSERT_EQ(outcomes.size(), 3u);
  EXPECT_THAT(outcomes[2], StatusIs(absl::StatusCode::kFailedPrecondition));
}

}  // namespace
}  // namespace fencegate
