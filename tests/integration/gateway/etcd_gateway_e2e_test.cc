// Copyright fencegate authors.
//
// etcd as the token source, end to end: workers lock through
// EtcdTokenSource against a real etcd, and a real gateway process follows
// the lock keys with its etcd watcher, so a handover raises the fence before
// the new holder writes anything.

#include <signal.h>

#include <memory>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "fencegate/client/etcd/etcd_token_source.h"
#include "fencegate/v1/gateway.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "tests/etcd_server.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

using ::fencegate::testing::EtcdServer;
using ::fencegate::testing::GatewayProcess;
using ::fencegate::testing::ReadFile;

class EtcdGatewayE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto etcd = EtcdServer::Start();
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = *std::move(etcd);
    StartGateway();
    client::EtcdTokenSourceOptions options;
    options.endpoint = etcd_->endpoint();
    auto source = client::EtcdTokenSource::Create(options);
    ASSERT_TRUE(source.ok()) << source.status();
    source_ = *std::move(source);
  }

  void StartGateway() {
    gateway_.reset();
    auto gateway = GatewayProcess::Start(
        dir_.path() + "/data", {"--etcd_endpoint=" + etcd_->endpoint()});
    ASSERT_TRUE(gateway.ok()) << gateway.status();
    gateway_ = *std::move(gateway);
    stub_ = v1::Gateway::NewStub(grpc::CreateChannel(
        gateway_->address(), grpc::InsecureChannelCredentials()));
  }

  grpc::Status Write(uint64_t token, const std::string& data) {
    v1::WriteRequest request;
    request.set_domain("jobs");
    request.set_token(token);
    request.set_resource("files/report.txt");
    request.add_ops()->mutable_put()->set_data(data);
    v1::WriteResponse response;
    grpc::ClientContext context;
    return stub_->Write(&context, request, &response);
  }
  uint64_t Fence() {
    v1::GetFenceRequest request;
    request.set_domain("jobs");
    v1::FenceState state;
    grpc::ClientContext context;
    if (!stub_->GetFence(&context, request, &state).ok()) return 0;
    return state.highest_token();
  }
  std::string Report() {
    auto text = ReadFile(dir_.path() + "/data/files/report.txt");
    return text.ok() ? *text : "";
  }

  testing::TempDir dir_;
  std::unique_ptr<EtcdServer> etcd_;
  std::unique_ptr<GatewayProcess> gateway_;
  std::unique_ptr<v1::Gateway::Stub> stub_;
  std::unique_ptr<client::EtcdTokenSource> source_;
};

// Worker A holds the etcd lock and writes. Its lease then ends behind its
// back (revoked here: what expiry does to a holder paused past its ttl).
// Worker B, waiting, takes the lock; the gateway raises the fence from the
// watch before B writes. A's late write is refused; the file is B's.
TEST_F(EtcdGatewayE2eTest, HandoverShutsOutThePausedHolder) {
  client::LockOptions options;
  options.ttl = absl::Seconds(10);
  ASSERT_OK_AND_ASSIGN(a, source_->Acquire("jobs", options, nullptr));
  ASSERT_TRUE(testing::WaitFor([&] { return Fence() == a->token(); }));
  ASSERT_TRUE(Write(a->token(), "A").ok());

  absl::StatusOr<std::unique_ptr<client::HeldLock>> b;
  std::thread waiter([&] { b = source_->Acquire("jobs", options, nullptr); });
  // B's key is queued behind A's; the watcher must not fence A out for it.
  ASSERT_TRUE(testing::WaitFor([&] {
    auto keys = etcd_->RangePrefix("fencegate/locks/jobs/");
    return keys.ok() && keys->size() == 2;
  }));
  EXPECT_TRUE(Write(a->token(), "A still holds").ok());

  auto keys = etcd_->RangePrefix("fencegate/locks/jobs/");
  ASSERT_TRUE(keys.ok());
  const std::string& a_key = (*keys)[0].key();
  int64_t lease = 0;
  ASSERT_TRUE(absl::SimpleHexAtoi(a_key.substr(a_key.rfind('/') + 1), &lease));
  ASSERT_OK(etcd_->RevokeLease(lease));
  waiter.join();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_GT((*b)->token(), a->token());
  // The fence moves to B's token with no write from B.
  ASSERT_TRUE(testing::WaitFor([&] { return Fence() == (*b)->token(); }));
  EXPECT_EQ(Write(a->token(), "A after the pause").error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(Report(), "A still holds");
  ASSERT_TRUE(Write((*b)->token(), "B").ok());
  EXPECT_EQ(Report(), "B");
}

// The fence raised from etcd survives a gateway crash; tokens from etcd
// keep rising across an etcd restart.
TEST_F(EtcdGatewayE2eTest, FencesAndTokensSurviveRestarts) {
  client::LockOptions options;
  options.ttl = absl::Seconds(10);
  uint64_t first = 0;
  {
    ASSERT_OK_AND_ASSIGN(a, source_->Acquire("jobs", options, nullptr));
    first = a->token();
    ASSERT_TRUE(testing::WaitFor([&] { return Fence() == first; }));
    ASSERT_OK(a->Release());
  }
  gateway_->Stop(SIGKILL);
  StartGateway();
  EXPECT_EQ(Fence(), first);
  EXPECT_EQ(Write(first - 1, "older").error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  etcd_->Kill();
  ASSERT_OK(etcd_->Restart());
  ASSERT_TRUE(testing::WaitFor([&] {
    auto b = source_->Acquire("jobs", options, nullptr);
    if (!b.ok()) return false;
    EXPECT_GT((*b)->token(), first);
    return true;
  }));
}

// fencectl lock with --etcd-endpoint: the command gets the key's revision
// as its token, the gateway has already fenced with it, and the lock is
// released afterwards (etcd holds no key of it).
TEST_F(EtcdGatewayE2eTest, FencectlLockWithEtcd) {
  std::string out, err;
  const std::string token_file = dir_.path() + "/token";
  ASSERT_EQ(testing::RunCommand(
                {FENCECTL_BIN, "--addr=" + gateway_->address(), "lock",
                 "--etcd-endpoint=" + etcd_->endpoint(), "jobs", "--",
                 "/bin/sh", "-c",
                 absl::StrCat("echo $FENCEGATE_TOKEN > ", token_file, " && \"",
                              FENCECTL_BIN,
                              "\" write --domain \"$FENCEGATE_DOMAIN\" "
                              "--token \"$FENCEGATE_TOKEN\" --resource "
                              "files/report.txt --put from-etcd-lock")},
                &out, &err),
            0)
      << err;
  uint64_t token = 0;
  ASSERT_TRUE(absl::SimpleAtoi(
      absl::StripAsciiWhitespace(*ReadFile(token_file)), &token));
  EXPECT_EQ(Report(), "from-etcd-lock");
  EXPECT_GE(Fence(), token);
  auto keys = etcd_->RangePrefix("fencegate/locks/jobs/");
  ASSERT_TRUE(keys.ok());
  EXPECT_TRUE(keys->empty());
}

}  // namespace
}  // namespace fencegate
