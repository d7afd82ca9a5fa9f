// Copyright fencegate authors.
//
// Rule 7 of the Fencer (fencing/fencer.h): a fence that moves without a
// write reaches the storage's fences too; and RouteFences
// (gateway/route_fences.h), which spreads that over every route whose
// storage keeps fences. Fakes stand for the storage here; the PostgreSQL
// route's fence table is tested in postgres_storage_fence_test.cc.

#include "fencing/storage_fence.h"

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "fencegate/common/stale_token.h"
#include "fencing/clock.h"
#include "fencing/fencer.h"
#include "gateway/route_fences.h"
#include "storage_adapters/registry.h"
#include "storage_adapters/router.h"
#include "tests/fencer_fixture.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

using ::fencegate::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

// A storage's fences in memory; `unavailable` makes every call fail.
struct FakeFences {
  absl::Status Raise(absl::string_view domain, uint64_t token) {
    if (unavailable) return absl::UnavailableError("storage down");
    uint64_t& held = fences[std::string(domain)];
    if (held > token) return StaleTokenError(domain, token, held);
    held = token;
    raises.emplace_back(std::string(domain), token);
    return absl::OkStatus();
  }
  absl::StatusOr<uint64_t> Next(absl::string_view domain, uint64_t at_least) {
    if (unavailable) return absl::UnavailableError("storage down");
    uint64_t& held = fences[std::string(domain)];
    held = std::max(held + 1, at_least);
    return held;
  }
  std::map<std::string, uint64_t> fences;
  std::vector<std::pair<std::string, uint64_t>> raises;
  bool unavailable = false;
};

class FakeStorageFence final : public StorageFence {
 public:
  absl::Status Raise(absl::string_view domain, uint64_t token) override {
    return fake.Raise(domain, token);
  }
  absl::StatusOr<uint64_t> Next(absl::string_view domain,
                                uint64_t at_least) override {
    return fake.Next(domain, at_least);
  }
  absl::StatusOr<uint64_t> Read(absl::string_view domain) override {
    auto it = fake.fences.find(std::string(domain));
    return it == fake.fences.end() ? 0 : it->second;
  }
  absl::Status CheckToken(uint64_t token) const override {
    return token > max_token
               ? absl::InvalidArgumentError("the fake cannot hold it")
               : absl::OkStatus();
  }
  FakeFences fake;
  uint64_t max_token = std::numeric_limits<uint64_t>::max();
};

class FencerStorageTest : public testing::FencerTest {
 protected:
  void SetUp() override {
    OpenStore();
    fencer_ = std::make_unique<Fencer>(store_.get(), Clock::Real(), &storage_);
  }
  uint64_t Local(const std::string& domain) {
    absl::StatusOr<FenceState> s = fencer_->Get(domain);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? s->highest_token : 0;
  }
  FakeStorageFence storage_;
};

TEST_F(FencerStorageTest, AFenceIsRaisedInTheStorageToo) {
  ASSERT_TRUE(fencer_->Fence("d", 5).ok());
  ASSERT_TRUE(fencer_->Fence("d", 5).ok());  // Equal: accepted, kept.
  EXPECT_THAT(storage_.fake.raises, ElementsAre(Pair("d", 5), Pair("d", 5)));
  EXPECT_EQ(Local("d"), 5u);
  // Stale here: the storage is not asked.
  EXPECT_TRUE(GetStaleToken(fencer_->Fence("d", 4).status()).has_value());
  EXPECT_EQ(storage_.fake.raises.size(), 2u);
}

TEST_F(FencerStorageTest, AStorageHoldingMoreMakesTheFenceStaleAndIsLearnt) {
  storage_.fake.fences["d"] = 9;  // Another gateway's Fence.
  absl::StatusOr<FenceDecision> d = fencer_->Fence("d", 5);
  std::optional<StaleTokenInfo> stale = GetStaleToken(d.status());
  ASSERT_TRUE(stale.has_value()) << d.status();
  EXPECT_EQ(stale->highest_token, 9u);
  EXPECT_FALSE(Fencer::AdvancedBeforeError(d.status()).has_value());
  EXPECT_EQ(Local("d"), 9u);
  // The write path now refuses token 8 without asking anyone.
  EXPECT_TRUE(GetStaleToken(Write("d", 8).status()).has_value());
  EXPECT_TRUE(Applied().empty());
}

// A token a storage cannot hold moves no fence, here or there (a Fence of
// 2^63 on a gateway with a PostgreSQL route used to raise the gateway's
// own fence, and refuse every later write of the domain through it).
TEST_F(FencerStorageTest, ATokenAStorageCannotHoldMovesNoFence) {
  ASSERT_TRUE(fencer_->Fence("d", 5).ok());
  storage_.max_token = 100;
  EXPECT_THAT(fencer_->Fence("d", 101).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(Local("d"), 5u);
  EXPECT_EQ(storage_.fake.fences["d"], 5u);
  ASSERT_TRUE(fencer_->Fence("d", 100).ok());
  EXPECT_EQ(Local("d"), 100u);
}

TEST_F(FencerStorageTest, AnUnreachableStorageFailsTheFenceAndSaysItMoved) {
  storage_.fake.unavailable = true;
  absl::StatusOr<FenceDecision> d = fencer_->Fence("d", 5);
  EXPECT_THAT(d.status(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(Fencer::AdvancedBeforeError(d.status()), 5u);
  EXPECT_EQ(Local("d"), 5u);
  storage_.fake.unavailable = false;
  ASSERT_TRUE(fencer_->Fence("d", 5).ok());  // Retried: reaches it.
  EXPECT_EQ(storage_.fake.fences["d"], 5u);
}

TEST_F(FencerStorageTest, NewTokensComeFromTheStorage) {
  storage_.fake.fences["d"] = 20;  // Another gateway's grants.
  absl::StatusOr<FenceDecision> d = fencer_->Sequence("d");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->fence.highest_token, 21u);
  EXPECT_EQ(Local("d"), 21u);
  EXPECT_EQ(fencer_->NextGrantable(fencer_->WaitTurn("d"), 22).value(), 22u);
  EXPECT_EQ(fencer_->NextGrantable(fencer_->WaitTurn("d"), 1).value(), 23u);
  storage_.fake.unavailable = true;
  EXPECT_THAT(fencer_->Sequence("d").status(),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(Local("d"), 21u);
}

// Refuses every advance past `limit`.
class LimitCheck final : public AdvanceCheck {
 public:
  explicit LimitCheck(uint64_t limit) : limit_(limit) {}
  std::optional<absl::Status> Check(const FenceState& current, uint64_t token,
                                    bool may_block) const override {
    return token > limit_ ? absl::PermissionDeniedError("above the limit")
                          : absl::OkStatus();
  }

 private:
  const uint64_t limit_;
};

// A refused Sequence moves nothing anywhere (it used to take the storage's
// next token first, then ask the check: the storage's fence moved, and its
// holder's next write was stale).
TEST_F(FencerStorageTest, ARefusedSequenceMovesNoStorage) {
  storage_.fake.fences["d"] = 5;
  ASSERT_TRUE(fencer_->Fence("d", 5).ok());
  const size_t raises = storage_.fake.raises.size();
  LimitCheck refuse_all(0);
  EXPECT_THAT(fencer_->Sequence("d", &refuse_all).status(),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(storage_.fake.fences["d"], 5u);
  EXPECT_EQ(storage_.fake.raises.size(), raises);
  EXPECT_EQ(Local("d"), 5u);
  // Admitted, it moves both.
  LimitCheck up_to_6(6);
  EXPECT_EQ(fencer_->Sequence("d", &up_to_6)->fence.highest_token, 6u);
  EXPECT_EQ(storage_.fake.fences["d"], 6u);
  // The storage ahead (another gateway's grants): checked from the
  // storage's fence, so a jump the check would refuse from here is not one.
  storage_.fake.fences["d"] = 40;
  LimitCheck up_to_41(41);
  EXPECT_EQ(fencer_->Sequence("d", &up_to_41)->fence.highest_token, 41u);
}

// Refuses an advance of more than `limit` above a fence that was raised,
// as a policy's max_advance does.
class MaxAdvanceCheck final : public AdvanceCheck {
 public:
  explicit MaxAdvanceCheck(uint64_t limit) : limit_(limit) {}
  std::optional<absl::Status> Check(const FenceState& current, uint64_t token,
                                    bool may_block) const override {
    if (current.advanced_at != absl::InfinitePast() &&
        token - current.highest_token > limit_) {
      return absl::PermissionDeniedError("above max_advance");
    }
    return absl::OkStatus();
  }

 private:
  const uint64_t limit_;
};

// A gateway that never saw a domain measures max_advance from the
// storage's fence: a second gateway used to take any first token, raise
// the database past it, and leave the holder of 5 stale for ever.
TEST_F(FencerStorageTest, MaxAdvanceIsMeasuredFromTheStoragesFence) {
  storage_.fake.fences["d"] = 5;  // Another gateway's holder.
  MaxAdvanceCheck max_advance(1000);
  EXPECT_THAT(fencer_->Fence("d", 9000000000000000000u, &max_advance).status(),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(storage_.fake.fences["d"], 5u);
  EXPECT_EQ(Local("d"), 5u);  // Learnt: the storage held it already.
  EXPECT_EQ(fencer_->Fence("d", 6, &max_advance)->fence.highest_token, 6u);
  EXPECT_EQ(storage_.fake.fences["d"], 6u);
  // A domain no storage knows: a first token is not measured from nothing.
  EXPECT_TRUE(fencer_->Fence("new", 9000000000000000000u, &max_advance).ok());
}

// The same for a Write (Execute, ExecuteAsync): a first Write through a
// gateway that never saw the domain is measured from the storage's fence,
// and nothing is applied past max_advance.
TEST_F(FencerStorageTest, AWritesMaxAdvanceIsMeasuredFromTheStoragesFence) {
  storage_.fake.fences["d"] = 5;
  MaxAdvanceCheck max_advance(1000);
  bool applied = false;
  EXPECT_THAT(fencer_
                  ->Execute(
                      "d", 9000000000000000000u,
                      [&] {
                        applied = true;
                        return absl::OkStatus();
                      },
                      &max_advance)
                  .status(),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_FALSE(applied);
  EXPECT_EQ(Local("d"), 5u);
  // Asynchronously, for another domain.
  storage_.fake.fences["e"] = 5;
  Fencer::AsyncApply apply = [&](Fencer::Applied done) {
    applied = true;
    std::move(done)(absl::OkStatus());
  };
  absl::Notification finished;
  absl::Status outcome;
  Fencer::DecisionCallback done = [&](absl::StatusOr<FenceDecision> decision) {
    outcome = decision.status();
    finished.Notify();
  };
  ExecuteAsyncOptions options;
  options.check = &max_advance;
  fencer_->ExecuteAsync("e", 9000000000000000000u, std::move(apply),
                        std::move(done), std::move(options));
  finished.WaitForNotification();
  EXPECT_THAT(outcome, StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_FALSE(applied);
  EXPECT_EQ(Local("e"), 5u);
  // Within max_advance of the storage's fence, a Write lands.
  EXPECT_TRUE(fencer_
                  ->Execute(
                      "d", 7, [] { return absl::OkStatus(); }, &max_advance)
                  .ok());
}

using FencerWithoutStorageTest = testing::FencerTest;

TEST_F(FencerWithoutStorageTest, NewTokensAreLocal) {
  EXPECT_EQ(fencer_->NextGrantable(fencer_->WaitTurn("d"), 7).value(), 7u);
  ASSERT_TRUE(fencer_->Fence("d", 3).ok());
  EXPECT_EQ(fencer_->Sequence("d")->fence.highest_token, 4u);
}

// RouteFences over routes whose fake adapters keep fences ("fenced://")
// and one that keeps none ("plain://").
class FakeFencedAdapter final : public StorageAdapter {
 public:
  explicit FakeFencedAdapter(FakeFences* fences) : fences_(fences) {}
  absl::Status Validate(const WriteTarget&, const Operations&) const override {
    return absl::OkStatus();
  }
  absl::Status Apply(const WriteTarget&, const Operations&,
                     OpResults*) override {
    return absl::OkStatus();
  }
  bool KeepsFences() const override { return fences_ != nullptr; }
  absl::Status RaiseFence(absl::string_view domain, uint64_t token) override {
    return fences_->Raise(domain, token);
  }
  absl::StatusOr<uint64_t> NextFence(absl::string_view domain,
                                     uint64_t at_least) override {
    return fences_->Next(domain, at_least);
  }
  absl::Status ReadFences(
      absl::FunctionRef<void(absl::string_view, uint64_t)> fn) override {
    if (fences_->unavailable) return absl::UnavailableError("storage down");
    for (const auto& [domain, token] : fences_->fences) fn(domain, token);
    return absl::OkStatus();
  }

 private:
  FakeFences* const fences_;
};

class RouteFencesTest : public testing::FencerTest {
 protected:
  void SetUp() override {
    OpenStore();
    ASSERT_TRUE(
        registry_
            .Register("fenced",
                      [this](const Uri& uri, const AdapterContext&)
                          -> absl::StatusOr<std::unique_ptr<StorageAdapter>> {
                        return std::make_unique<FakeFencedAdapter>(
                            &storages_[uri.authority]);
                      })
            .ok());
    ASSERT_TRUE(
        registry_
            .Register("plain",
                      [](const Uri&, const AdapterContext&)
                          -> absl::StatusOr<std::unique_ptr<StorageAdapter>> {
                        return std::make_unique<FakeFencedAdapter>(nullptr);
                      })
            .ok());
    absl::StatusOr<std::unique_ptr<Router>> router = Router::Create(
        registry_,
        {{"a", "fenced://a"}, {"b", "fenced://b"}, {"c", "plain://c"}});
    ASSERT_TRUE(router.ok()) << router.status();
    router_ = *std::move(router);
    fences_ = std::make_unique<RouteFences>(*router_);
  }
  AdapterRegistry registry_;
  std::map<std::string, FakeFences> storages_;
  std::unique_ptr<Router> router_;
  std::unique_ptr<RouteFences> fences_;
};

TEST_F(RouteFencesTest, ARaiseReachesEveryRouteThatKeepsFences) {
  ASSERT_TRUE(fences_->Raise("d", 4).ok());
  EXPECT_EQ(storages_["a"].fences["d"], 4u);
  EXPECT_EQ(storages_["b"].fences["d"], 4u);
  storages_["b"].fences["d"] = 6;
  absl::Status stale = fences_->Raise("d", 5);
  ASSERT_TRUE(GetStaleToken(stale).has_value()) << stale;
  EXPECT_EQ(GetStaleToken(stale)->highest_token, 6u);
  EXPECT_THAT(stale.message(), HasSubstr("route \"b\""));
  storages_["a"].unavailable = true;
  absl::Status down = fences_->Raise("d", 7);
  EXPECT_THAT(down, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(down.message(), HasSubstr("route \"a\""));
}

TEST_F(RouteFencesTest, NextTakesItsTokenAboveEveryRoute) {
  EXPECT_EQ(fences_->Next("d", 3).value(), 3u);
  EXPECT_EQ(storages_["b"].fences["d"], 3u);
  // Route b is ahead of the arbiter: the token is taken again above it.
  storages_["b"].fences["d"] = 10;
  EXPECT_EQ(fences_->Next("d", 4).value(), 11u);
  EXPECT_EQ(storages_["a"].fences["d"], 11u);
  EXPECT_EQ(storages_["b"].fences["d"], 11u);
  EXPECT_EQ(fences_->Next("d", 1).value(), 12u);
}

TEST_F(RouteFencesTest, RecoveryRaisesWhatTheStoreLostAndNeverLowers) {
  storages_["a"].fences = {{"lost", 7}, {"older", 9}, {"kept", 2}};
  storages_["b"].fences = {{"older", 4}};
  ASSERT_TRUE(store_->Raise("older", 5, absl::Now()).ok());
  ASSERT_TRUE(store_->Raise("kept", 3, absl::Now()).ok());
  absl::StatusOr<std::vector<RouteFences::Line>> lines =
      fences_->Recover(*store_, *Clock::Real());
  ASSERT_TRUE(lines.ok()) << lines.status();
  ASSERT_EQ(lines->size(), 2u);
  EXPECT_TRUE((*lines)[0].warning);
  EXPECT_THAT((*lines)[0].text,
              HasSubstr("1 missing from the fence store and 1 lower"));
  EXPECT_FALSE((*lines)[1].warning);
  EXPECT_EQ(store_->Get("lost")->highest_token, 7u);
  EXPECT_EQ(store_->Get("older")->highest_token, 9u);
  EXPECT_EQ(store_->Get("kept")->highest_token, 3u);
  storages_["b"].unavailable = true;
  lines = fences_->Recover(*store_, *Clock::Real());
  ASSERT_TRUE(lines.ok()) << lines.status();
  EXPECT_TRUE((*lines)[1].warning);
  EXPECT_THAT((*lines)[1].text, HasSubstr("not read at start-up"));
}

}  // namespace
}  // namespace fencegate
