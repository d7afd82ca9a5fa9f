// Copyright fencegate authors.
//
// RedlockTokenSource against three real redis-servers and a real gateway:
// the lock needs a majority, its token comes from the gateway's Sequence
// (so the fence is the token when Acquire returns), a minority down is
// tolerated, a majority down is a clear UNAVAILABLE, and `fencectl lock
// --redlock` runs a command with the token.

#include "fencegate/client/redis/redlock_token_source.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "fencegate/v1/gateway.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "tests/gateway_fixture.h"
#include "tests/redis_server.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

using ::fencegate::testing::RedisServer;
using ::fencegate::testing::RunCommand;
using ::fencegate::testing::StatusIs;
using ::fencegate::testing::WaitFor;

class RedlockTokenSourceTest : public testing::GatewayFixture {
 protected:
  void SetUp() override {
    GatewayFixture::SetUp();
    if (HasFatalFailure()) return;
    for (int i = 0; i < 3; ++i) {
      auto redis = RedisServer::Start();
      ASSERT_TRUE(redis.ok()) << redis.status();
      endpoints_.push_back((*redis)->endpoint());
      servers_.push_back(*std::move(redis));
    }
    source_ = Source();
  }

  std::unique_ptr<client::RedlockTokenSource> Source() {
    client::RedlockTokenSourceOptions options;
    options.endpoints = endpoints_;
    options.gateway = channel_;
    // A server slowed by a loaded machine is not down: the tests stop or
    // kill a server when they mean it to be.
    options.node_timeout = absl::Seconds(2);
    auto source = client::RedlockTokenSource::Create(options);
    EXPECT_TRUE(source.ok()) << source.status();
    return source.ok() ? *std::move(source) : nullptr;
  }

  std::vector<std::unique_ptr<RedisServer>> servers_;
  std::vector<std::string> endpoints_;
  std::unique_ptr<client::RedlockTokenSource> source_;
};

TEST_F(RedlockTokenSourceTest, AMajorityHoldsTheLockAndTheGatewayIssuesTokens) {
  ASSERT_OK_AND_ASSIGN(first, source_->Acquire("jobs", {}, nullptr));
  EXPECT_EQ(first->token(), 1u);
  EXPECT_EQ(Highest("jobs"), 1u);
  int holding = 0;
  for (auto& s : servers_) {
    holding += *s->Command({"EXISTS", "{fencegate:jobs}:lock"}) == "1";
  }
  EXPECT_EQ(holding, 3);
  client::LockOptions brief;
  brief.wait = absl::Milliseconds(300);
  EXPECT_THAT(source_->Acquire("jobs", brief, nullptr),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  ASSERT_OK(first->Release());
  ASSERT_OK_AND_ASSIGN(second, source_->Acquire("jobs", {}, nullptr));
  EXPECT_EQ(second->token(), 2u);
  EXPECT_EQ(Highest("jobs"), 2u);
  ASSERT_OK(second->Release());
}

TEST_F(RedlockTokenSourceTest, AMinorityDownIsToleratedAMajorityIsNot) {
  servers_[0].reset();  // One of three: a majority remains.
  ASSERT_OK_AND_ASSIGN(held, source_->Acquire("jobs", {}, nullptr));
  EXPECT_GT(held->token(), 0u);
  ASSERT_OK(held->Release());
  servers_[1].reset();  // Two of three: no majority.
  client::LockOptions brief;
  brief.wait = absl::Milliseconds(200);
  absl::StatusOr<std::unique_ptr<client::HeldLock>> none =
      source_->Acquire("jobs", brief, nullptr);
  EXPECT_THAT(none, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_TRUE(absl::StrContains(none.status().message(), "1 of 3"))
      << none.status();
}

TEST_F(RedlockTokenSourceTest, KeysVanishingFromAMajorityLoseTheLock) {
  client::LockOptions quick;
  quick.ttl = absl::Milliseconds(600);
  std::atomic<bool> lost{false};
  ASSERT_OK_AND_ASSIGN(held,
                       source_->Acquire("jobs", quick, [&] { lost = true; }));
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK(servers_[i]->Command({"DEL", "{fencegate:jobs}:lock"}).status());
  }
  EXPECT_TRUE(WaitFor([&] { return lost.load(); }, absl::Seconds(10)));
  EXPECT_THAT(held->Release(), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(RedlockTokenSourceTest, BadOptionsAndFencectl) {
  client::RedlockTokenSourceOptions options;
  options.gateway = channel_;
  EXPECT_THAT(client::RedlockTokenSource::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument));
  options.endpoints = {endpoints_[0], endpoints_[0]};
  EXPECT_THAT(client::RedlockTokenSource::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument));
  options.endpoints = {"nowhere"};
  EXPECT_THAT(client::RedlockTokenSource::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument));

  std::string out, err;
  EXPECT_EQ(
      RunCommand({FENCECTL_BIN, "--addr=" + gateway_->address(), "lock",
                  "--redlock=" + absl::StrJoin(endpoints_, ","), "nightly",
                  "--", "/bin/sh", "-c", "echo token=$FENCEGATE_TOKEN"},
                 &out, &err),
      0)
      << err;
  EXPECT_TRUE(absl::StrContains(out, "token=1")) << out;
  EXPECT_EQ(Highest("nightly"), 1u);
  EXPECT_EQ(RunCommand({FENCECTL_BIN, "--addr=" + gateway_->address(), "lock",
                        "--redlock=nowhere", "nightly", "--", "/bin/true"},
                       &out, &err),
            2);
}

}  // namespace
}  // namespace fencegate
