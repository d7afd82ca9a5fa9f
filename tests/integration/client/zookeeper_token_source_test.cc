// Copyright fencegate authors.
//
// ZooKeeperTokenSource against a real ZooKeeper (Debian's package, started
// by the fixture) and a real gateway: the token is the holder's czxid and
// the fence is raised to it; a waiter takes over when the holder releases;
// a deleted znode and a partition longer than the session are lost locks;
// `fencectl lock --zookeeper` runs a command with the token.

#include "fencegate/client/zookeeper/zookeeper_token_source.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "fencegate/v1/gateway.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "tests/gateway_fixture.h"
#include "tests/test_util.h"
#include "tests/zookeeper_server.h"

namespace fencegate {
namespace {

using ::fencegate::testing::RunCommand;
using ::fencegate::testing::StatusIs;
using ::fencegate::testing::WaitFor;
using ::fencegate::testing::ZooKeeperServer;

class ZooKeeperTokenSourceTest : public testing::GatewayFixture {
 protected:
  static void SetUpTestSuite() {
    auto server = ZooKeeperServer::Start();
    // Not ASSERT: a fatal failure here makes gtest skip the suite's tests,
    // which CTest counts as skipped, not failed. Each test fails instead.
    if (!server.ok()) {
      start_error_ = server.status().ToString();
      return;
    }
    server_ = server->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

  void SetUp() override {
    GatewayFixture::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_NE(server_, nullptr) << start_error_;
    source_ = Source();
  }

  std::unique_ptr<client::ZooKeeperTokenSource> Source() {
    client::ZooKeeperTokenSourceOptions options;
    options.hosts = server_->endpoint();
    // Each test its own locks: the server lives through the suite.
    options.lock_path = absl::StrCat(
        "/", ::testing::UnitTest::GetInstance()->current_test_info()->name());
    options.gateway = channel_;
    auto source = client::ZooKeeperTokenSource::Create(options);
    EXPECT_TRUE(source.ok()) << source.status();
    return source.ok() ? *std::move(source) : nullptr;
  }

  static ZooKeeperServer* server_;

  static inline std::string start_error_;
  std::unique_ptr<client::ZooKeeperTokenSource> source_;
};

ZooKeeperServer* ZooKeeperTokenSourceTest::server_ = nullptr;

TEST_F(ZooKeeperTokenSourceTest, TheTokenIsTheCzxidAndAWaiterTakesOver) {
  client::LockOptions options;
  options.ttl = absl::Seconds(10);  // Rides out a stalled server.
  ASSERT_OK_AND_ASSIGN(first,
                       source_->Acquire("billing/june", options, nullptr));
  EXPECT_GT(first->token(), 0u);
  EXPECT_EQ(Highest("billing/june"), first->token());
  client::LockOptions brief = options;
  brief.wait = absl::Milliseconds(300);
  EXPECT_THAT(source_->Acquire("billing/june", brief, nullptr),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  uint64_t second_token = 0;
  std::thread waiter([&] {
    client::LockOptions patient = options;
    patient.wait = absl::Seconds(20);
    absl::StatusOr<std::unique_ptr<client::HeldLock>> second =
        source_->Acquire("billing/june", patient, nullptr);
    ASSERT_TRUE(second.ok()) << second.status();
    second_token = (*second)->token();
    EXPECT_OK((*second)->Release());
  });
  absl::SleepFor(absl::Milliseconds(300));  // Let the waiter queue up.
  ASSERT_OK(first->Release());
  waiter.join();
  EXPECT_GT(second_token, first->token());
  EXPECT_EQ(Highest("billing/june"), second_token);
}

TEST_F(ZooKeeperTokenSourceTest, APartitionLongerThanTheSessionLosesTheLock) {
  client::LockOptions options;
  options.ttl = absl::Seconds(1);
  std::atomic<bool> lost{false};
  ASSERT_OK_AND_ASSIGN(held,
                       source_->Acquire("jobs", options, [&] { lost = true; }));
  server_->Pause();
  const bool noticed = WaitFor([&] { return lost.load(); }, absl::Seconds(10));
  server_->Resume();
  EXPECT_TRUE(noticed);
  EXPECT_TRUE(held->lost());
  EXPECT_THAT(held->Release(), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(ZooKeeperTokenSourceTest, BadInputAndFencectl) {
  client::ZooKeeperTokenSourceOptions options;
  options.hosts = server_->endpoint();
  options.gateway = channel_;
  options.lock_path = "relative";
  EXPECT_THAT(client::ZooKeeperTokenSource::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(source_->Acquire("a//b", {}, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument));
  options.lock_path = "/x";
  options.hosts = absl::StrCat("127.0.0.1:", testing::FreeLoopbackPort());
  options.connect_timeout = absl::Seconds(2);
  ASSERT_OK_AND_ASSIGN(dead, client::ZooKeeperTokenSource::Create(options));
  EXPECT_THAT(dead->Acquire("jobs", {}, nullptr),
              StatusIs(absl::StatusCode::kUnavailable));

  std::string out, err;
  EXPECT_EQ(RunCommand({FENCECTL_BIN, "--addr=" + gateway_->address(), "lock",
                        "--zookeeper=" + server_->endpoint(), "nightly", "--",
                        "/bin/sh", "-c", "echo token=$FENCEGATE_TOKEN"},
                       &out, &err),
            0)
      << err;
  EXPECT_TRUE(absl::StrContains(out, "token=")) << out;
  EXPECT_GT(Highest("nightly"), 0u);
}

}  // namespace
}  // namespace fencegate
