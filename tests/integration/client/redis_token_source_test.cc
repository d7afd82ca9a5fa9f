// Copyright fencegate authors.
//
// RedisTokenSource against a real redis-server and a real gateway: tokens
// rise with every grant and the fence is raised to each before Acquire
// returns; a contended lock waits; a counter that went backwards (a
// failover) is raised above the fence; a key that vanishes is a lost lock;
// `fencectl lock --redis` runs a command with the token.

#include "fencegate/client/redis/redis_token_source.h"

#include <atomic>
#include <memory>
#include <string>

#include "absl/strings/match.h"
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

class RedisTokenSourceTest : public testing::GatewayFixture {
 protected:
  void SetUp() override {
    GatewayFixture::SetUp();
    if (HasFatalFailure()) return;
    auto redis = RedisServer::Start();
    ASSERT_TRUE(redis.ok()) << redis.status();
    redis_ = *std::move(redis);
    client::RedisTokenSourceOptions options;
    options.endpoint = redis_->endpoint();
    options.gateway = channel_;
    ASSERT_OK_AND_ASSIGN(source, client::RedisTokenSource::Create(options));
    source_ = std::move(source);
  }

  std::unique_ptr<RedisServer> redis_;
  std::unique_ptr<client::RedisTokenSource> source_;
};

TEST_F(RedisTokenSourceTest, TokensRiseAndTheFenceIsRaisedOnEveryGrant) {
  ASSERT_OK_AND_ASSIGN(first, source_->Acquire("jobs", {}, nullptr));
  EXPECT_GT(first->token(), 0u);
  EXPECT_EQ(Highest("jobs"), first->token());
  const uint64_t t1 = first->token();
  ASSERT_OK(first->Release());
  ASSERT_OK_AND_ASSIGN(second, source_->Acquire("jobs", {}, nullptr));
  EXPECT_GT(second->token(), t1);
  EXPECT_EQ(Highest("jobs"), second->token());
  EXPECT_EQ(*redis_->Command({"GET", "{fencegate:jobs}:token"}),
            absl::StrCat(second->token()));
  ASSERT_OK(second->Release());
  // Released: the key is gone.
  EXPECT_EQ(*redis_->Command({"EXISTS", "{fencegate:jobs}:lock"}), "0");
}

TEST_F(RedisTokenSourceTest, AContendedLockWaitsThenTimesOut) {
  ASSERT_OK_AND_ASSIGN(held, source_->Acquire("jobs", {}, nullptr));
  client::LockOptions brief;
  brief.wait = absl::Milliseconds(300);
  absl::StatusOr<std::unique_ptr<client::HeldLock>> second =
      source_->Acquire("jobs", brief, nullptr);
  EXPECT_THAT(second, StatusIs(absl::StatusCode::kDeadlineExceeded));
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    client::LockOptions patient;
    patient.wait = absl::Seconds(10);
    absl::StatusOr<std::unique_ptr<client::HeldLock>> lock =
        source_->Acquire("jobs", patient, nullptr);
    EXPECT_TRUE(lock.ok()) << lock.status();
    if (lock.ok()) {
      EXPECT_GT((*lock)->token(), held->token());
      got = true;
    }
  });
  ASSERT_OK(held->Release());
  waiter.join();
  EXPECT_TRUE(got);
}

// After a failover the counter can be behind the fence: the new holder's
// token is raised above it rather than refused for ever.
TEST_F(RedisTokenSourceTest, ACounterBehindTheFenceIsRaisedAboveIt) {
  ASSERT_OK_AND_ASSIGN(held, source_->Acquire("jobs", {}, nullptr));
  ASSERT_OK(held->Release());
  // Others raised the fence far ahead; the counter restarts at 0.
  v1::FenceRequest fence;
  fence.set_domain("jobs");
  fence.set_token(1000);
  v1::FenceState state;
  grpc::ClientContext context;
  ASSERT_TRUE(
      v1::Gateway::NewStub(channel_)->Fence(&context, fence, &state).ok());
  ASSERT_OK(redis_->Command({"SET", "{fencegate:jobs}:token", "0"}).status());
  ASSERT_OK_AND_ASSIGN(next, source_->Acquire("jobs", {}, nullptr));
  EXPECT_GT(next->token(), 1000u);
  EXPECT_EQ(Highest("jobs"), next->token());
}

TEST_F(RedisTokenSourceTest, AVanishedKeyIsALostLock) {
  client::LockOptions quick;
  quick.ttl = absl::Milliseconds(600);
  std::atomic<bool> lost{false};
  ASSERT_OK_AND_ASSIGN(held,
                       source_->Acquire("jobs", quick, [&] { lost = true; }));
  ASSERT_OK(redis_->Command({"DEL", "{fencegate:jobs}:lock"}).status());
  EXPECT_TRUE(WaitFor([&] { return lost.load(); }, absl::Seconds(10)));
  EXPECT_TRUE(held->lost());
  EXPECT_THAT(held->Release(), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(RedisTokenSourceTest, BadInputAndUnreachableServers) {
  client::RedisTokenSourceOptions options;
  options.endpoint = "nowhere";
  options.gateway = channel_;
  EXPECT_THAT(client::RedisTokenSource::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument));
  options.endpoint = redis_->endpoint();
  options.gateway = nullptr;
  EXPECT_THAT(client::RedisTokenSource::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument));
  options.endpoint = absl::StrCat("127.0.0.1:", testing::FreeLoopbackPort());
  options.gateway = channel_;
  ASSERT_OK_AND_ASSIGN(dead, client::RedisTokenSource::Create(options));
  EXPECT_THAT(dead->Acquire("jobs", {}, nullptr),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(source_->Acquire(std::string("a\0b", 3), {}, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(RedisTokenSourceTest, FencectlLockTakesTheLockFromRedis) {
  std::string out, err;
  const int rc = RunCommand(
      {FENCECTL_BIN, "--addr=" + gateway_->address(), "lock",
       "--redis=" + redis_->endpoint(), "nightly", "--", "/bin/sh", "-c",
       absl::StrCat(FENCECTL_BIN, " --addr=", gateway_->address(),
                    " write --domain=\"$FENCEGATE_DOMAIN\" "
                    "--token=\"$FENCEGATE_TOKEN\" --resource=files/nightly "
                    "--put=done && echo \"token=$FENCEGATE_TOKEN\"")},
      &out, &err);
  EXPECT_EQ(rc, 0) << err;
  EXPECT_TRUE(absl::StrContains(out, "token=1")) << out;
  EXPECT_EQ(Highest("nightly"), 1u);
  EXPECT_EQ(*testing::ReadFile(dir_.path() + "/data/files/nightly"), "done");
  // An unreachable Redis is exit code 5.
  EXPECT_EQ(RunCommand({FENCECTL_BIN, "--addr=" + gateway_->address(), "lock",
                        absl::StrCat("--redis=127.0.0.1:",
                                     testing::FreeLoopbackPort()),
                        "nightly", "--", "/bin/true"},
                       &out, &err),
            5);
}

}  // namespace
}  // namespace fencegate
