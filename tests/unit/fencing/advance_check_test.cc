// Copyright fencegate authors.
//
// Fencer rule 6 (fencing/fencer.h): an AdvanceCheck is asked before a token
// raises a fence, through every entry point, and a refusal moves nothing
// and applies nothing.

#include "fencing/advance_check.h"

#include <atomic>
#include <memory>
#include <optional>
#include <vector>

#include "fencing/clock.h"
#include "fencing/fencer.h"
#include "tests/fence_store_fixture.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

using ::fencegate::testing::StatusIs;

// Admits tokens up to `limit`; undecided without blocking if `defer`.
class LimitCheck final : public AdvanceCheck {
 public:
  explicit LimitCheck(uint64_t limit, bool defer = false)
      : limit_(limit), defer_(defer) {}
  std::optional<absl::Status> Check(const FenceState& current, uint64_t token,
                                    bool may_block) const override {
    ++calls;
    last_current = current.highest_token;
    if (defer_ && !may_block) return std::nullopt;
    if (token > limit_) return absl::PermissionDeniedError("above the limit");
    return absl::OkStatus();
  }
  mutable int calls = 0;
  mutable uint64_t last_current = 0;

 private:
  const uint64_t limit_;
  const bool defer_;
};

class AdvanceCheckTest : public testing::FenceStoreFixture {
 protected:
  void SetUp() override {
    OpenStore();
    fencer_ = std::make_unique<Fencer>(store_.get(), Clock::Real());
  }
  uint64_t Highest(const std::string& domain) {
    absl::StatusOr<FenceState> state = fencer_->Get(domain);
    EXPECT_TRUE(state.ok()) << state.status();
    return state.ok() ? state->highest_token : 0;
  }
  std::unique_ptr<Fencer> fencer_;
};

TEST_F(AdvanceCheckTest, RefusedAdvanceMovesNothingAndAppliesNothing) {
  LimitCheck check(10);
  int applies = 0;
  auto apply = [&] {
    ++applies;
    return absl::OkStatus();
  };
  ASSERT_OK(fencer_->Execute("d", 5, apply, &check).status());
  EXPECT_EQ(check.calls, 1);
  EXPECT_EQ(check.last_current, 0u);
  EXPECT_EQ(applies, 1);
  // Refused: the fence stays at 5, nothing applied.
  EXPECT_THAT(fencer_->Execute("d", 11, apply, &check),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(check.last_current, 5u);
  EXPECT_EQ(applies, 1);
  EXPECT_EQ(Highest("d"), 5u);
  EXPECT_THAT(fencer_->Fence("d", 12, &check),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(Highest("d"), 5u);
  // Equal and stale tokens are not advances: never asked.
  const int calls = check.calls;
  ASSERT_OK(fencer_->Execute("d", 5, apply, &check).status());
  EXPECT_THAT(fencer_->Execute("d", 4, apply, &check),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(check.calls, calls);
  // Without a check, the same token advances.
  ASSERT_OK(fencer_->Fence("d", 12).status());
  EXPECT_EQ(Highest("d"), 12u);
}

TEST_F(AdvanceCheckTest, AsyncPathsAskTheCheckToo) {
  LimitCheck check(10);
  std::vector<absl::StatusOr<FenceDecision>> outcomes;
  int applies = 0;
  Fencer::AsyncApply apply = [&](Fencer::Applied applied) {
    ++applies;
    std::move(applied)(absl::OkStatus());
  };
  Fencer::DecisionCallback done = [&](absl::StatusOr<FenceDecision> d) {
    outcomes.push_back(std::move(d));
  };
  fencer_->ExecuteAsync("a", 11, std::move(apply), std::move(done),
                        {&check, nullptr});
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_THAT(outcomes[0], StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(applies, 0);
  EXPECT_EQ(Highest("a"), 0u);

  // TryExecuteAsync decides a refusal from memory (the fence is cached
  // once read).
  ASSERT_OK(fencer_->Fence("a", 3).status());
  apply = [&](Fencer::Applied applied) {
    ++applies;
    std::move(applied)(absl::OkStatus());
  };
  done = [&](absl::StatusOr<FenceDecision> d) {
    outcomes.push_back(std::move(d));
  };
  if (store_->RaiseAsyncNeverBlocks()) {
    EXPECT_TRUE(fencer_->TryExecuteAsync("a", 11, apply, done, &check));
    ASSERT_EQ(outcomes.size(), 2u);
    EXPECT_THAT(outcomes[1], StatusIs(absl::StatusCode::kPermissionDenied));
  }
  EXPECT_EQ(applies, 0);
  EXPECT_EQ(Highest("a"), 3u);

  // A check that cannot decide without blocking makes TryExecuteAsync
  // decline, having called nothing; ExecuteAsync then decides.
  LimitCheck deferring(10, /*defer=*/true);
  Fencer::AsyncApply apply2 = [&](Fencer::Applied applied) {
    ++applies;
    std::move(applied)(absl::OkStatus());
  };
  Fencer::DecisionCallback done2 = [&](absl::StatusOr<FenceDecision> d) {
    outcomes.push_back(std::move(d));
  };
  const size_t before = outcomes.size();
  EXPECT_FALSE(fencer_->TryExecuteAsync("a", 4, apply2, done2, &deferring));
  EXPECT_EQ(outcomes.size(), before);
  EXPECT_EQ(applies, 0);
  fencer_->ExecuteAsync("a", 4, std::move(apply2), std::move(done2),
                        {&deferring, nullptr});
  ASSERT_EQ(outcomes.size(), before + 1);
  ASSERT_OK(outcomes.back().status());
  EXPECT_EQ(applies, 1);
  EXPECT_EQ(Highest("a"), 4u);
}

}  // namespace
}  // namespace fencegate
