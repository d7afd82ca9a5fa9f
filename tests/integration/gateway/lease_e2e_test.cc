// Copyright fencegate authors.
//
// The built-in lease service end to end, through a real gateway process:
// contention with a paused holder, handover fencing, owner-only release,
// loss of keep-alive, tokens across restarts, and fencectl lock.

#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "fencegate/client/lease_token_source.h"
#include "fencegate/client/run_exclusive.h"
#include "fencegate/v1/gateway.grpc.pb.h"
#include "fencegate/v1/lease.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

using ::fencegate::testing::GatewayProcess;
using ::fencegate::testing::ReadFile;
using ::fencegate::testing::StatusIs;

class LeaseE2eTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(); }
  void Start() {
    gateway_.reset();
    auto gateway = GatewayProcess::Start(dir_.path() + "/data");
    ASSERT_TRUE(gateway.ok()) << gateway.status();
    gateway_ = *std::move(gateway);
    channel_ = grpc::CreateChannel(gateway_->address(),
                                   grpc::InsecureChannelCredentials());
    lease_ = v1::Lease::NewStub(channel_);
    gw_ = v1::Gateway::NewStub(channel_);
  }

  v1::AcquireResponse Acquire(const std::string& name, uint32_t ttl_ms,
                              uint32_t wait_ms = 0) {
    v1::AcquireRequest request;
    request.set_name(name);
    request.set_ttl_ms(ttl_ms);
    request.set_wait_ms(wait_ms);
    request.set_owner("e2e");
    v1::AcquireResponse response;
    grpc::ClientContext context;
    grpc::Status s = lease_->Acquire(&context, request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response;
  }
  grpc::Status Write(uint64_t token, const std::string& data) {
    v1::WriteRequest request;
    request.set_domain("jobs");
    request.set_token(token);
    request.set_resource("files/report.txt");
    request.add_ops()->mutable_put()->set_data(data);
    v1::WriteResponse response;
    grpc::ClientContext context;
    return gw_->Write(&context, request, &response);
  }
  uint64_t Fence(const std::string& domain) {
    v1::GetFenceRequest request;
    request.set_domain(domain);
    v1::FenceState state;
    grpc::ClientContext context;
    EXPECT_TRUE(gw_->GetFence(&context, request, &state).ok());
    return state.highest_token();
  }
  std::string Report() {
    auto text = ReadFile(dir_.path() + "/data/files/report.txt");
    return text.ok() ? *text : "";
  }

  testing::TempDir dir_;
  std::unique_ptr<GatewayProcess> gateway_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Lease::Stub> lease_;
  std::unique_ptr<v1::Gateway::Stub> gw_;
};

// Worker A holds the lock, writes, then pauses (stops renewing, as a long GC
// pause would) past its lease. Worker B acquires and writes. A resumes: its
// write is refused and the file keeps B's contents.
TEST_F(LeaseE2eTest, PausedHolderIsShutOutAfterHandover) {
  v1::AcquireResponse a = Acquire("jobs", 200);
  ASSERT_TRUE(a.acquired());
  ASSERT_TRUE(Write(a.token(), "A before pause").ok());
  // B waits for the lock; it is handed over when A's lease expires.
  v1::AcquireResponse b = Acquire("jobs", 60000, 30000);
  ASSERT_TRUE(b.acquired());
  EXPECT_GT(b.token(), a.token());
  // The handover alone raised the fence: B has not written yet.
  EXPECT_EQ(Fence("jobs"), b.token());
  EXPECT_EQ(Write(a.token(), "A after pause").error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(Report(), "A before pause");
  ASSERT_TRUE(Write(b.token(), "B").ok());
  EXPECT_EQ(Write(a.token(), "A again").error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(Report(), "B");
}

TEST_F(LeaseE2eTest, NonOwnerReleaseIsRefused) {
  v1::AcquireResponse a = Acquire("jobs", 60000);
  ASSERT_TRUE(a.acquired());
  v1::ReleaseRequest request;
  request.set_name("jobs");
  request.set_lease_id("0123456789abcdef0123456789abcdef");
  v1::ReleaseResponse response;
  grpc::ClientContext context;
  EXPECT_EQ(lease_->Release(&context, request, &response).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_FALSE(Acquire("jobs", 60000).acquired());  // Still held.
}

TEST_F(LeaseE2eTest, LossOfKeepAliveIsReportedToTheWorker) {
  client::LeaseTokenSource source(channel_);
  client::LockOptions options;
  options.ttl = absl::Milliseconds(600);
  std::atomic<int> lost_calls{0};
  ASSERT_OK_AND_ASSIGN(lock,
                       source.Acquire("jobs", options, [&] { ++lost_calls; }));
  EXPECT_FALSE(lock->lost());
  // The gateway dies: renewals fail until the ttl since the last one runs
  // out, and the worker is told.
  gateway_->Stop(SIGKILL);
  ASSERT_TRUE(testing::WaitFor([&] { return lock->lost(); }));
  EXPECT_EQ(lost_calls.load(), 1);
}

TEST_F(LeaseE2eTest, ExpiredLeaseIsLostForTheHolder) {
  v1::AcquireResponse a = Acquire("jobs", 150);
  ASSERT_TRUE(a.acquired());
  // Poll with try-acquires (a KeepAlive would renew the lease).
  ASSERT_TRUE(
      testing::WaitFor([&] { return Acquire("jobs", 60000).acquired(); }));
  v1::KeepAliveRequest request;
  request.set_name("jobs");
  request.set_lease_id(a.lease_id());
  v1::KeepAliveResponse response;
  grpc::ClientContext context;
  EXPECT_EQ(lease_->KeepAlive(&context, request, &response).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(LeaseE2eTest, TokensSurviveRestartAndNeverGoBackwards) {
  v1::AcquireResponse a = Acquire("jobs", 60000);
  ASSERT_TRUE(a.acquired());
  gateway_->Stop(SIGKILL);
  Start();
  // The lease survived the crash: still held.
  EXPECT_FALSE(Acquire("jobs", 60000).acquired());
  v1::ReleaseRequest request;
  request.set_name("jobs");
  request.set_lease_id(a.lease_id());
  v1::ReleaseResponse response;
  grpc::ClientContext context;
  ASSERT_TRUE(lease_->Release(&context, request, &response).ok());
  v1::AcquireResponse b = Acquire("jobs", 60000);
  ASSERT_TRUE(b.acquired());
  EXPECT_GT(b.token(), a.token());
}

TEST_F(LeaseE2eTest, RunExclusiveHandsTheTokenAndReleases) {
  client::LeaseTokenSource source(channel_);
  uint64_t seen = 0;
  ASSERT_OK(client::RunExclusive(
      source, "jobs", {}, [&](const client::LockContext& lock) {
        seen = lock.token;
        grpc::Status s = Write(lock.token, "exclusive");
        return s.ok() ? absl::OkStatus()
                      : absl::InternalError(s.error_message());
      }));
  EXPECT_GT(seen, 0u);
  EXPECT_EQ(Report(), "exclusive");
  // Released even when the work fails. Each holding's seqs start at 1.
  std::vector<uint64_t> seqs;
  EXPECT_THAT(client::RunExclusive(source, "jobs", {},
                                   [&](const client::LockContext& lock) {
                                     seqs.push_back(lock.seq.Next());
                                     seqs.push_back(lock.seq.Next());
                                     return absl::AbortedError("work failed");
                                   }),
              StatusIs(absl::StatusCode::kAborted));
  EXPECT_EQ(seqs, (std::vector<uint64_t>{1, 2}));
  v1::AcquireResponse next = Acquire("jobs", 60000);
  EXPECT_TRUE(next.acquired());
  EXPECT_EQ(next.token(), seen + 2);
}

TEST_F(LeaseE2eTest, FencectlLockRunsTheCommandWithTheToken) {
  const std::string addr = "--addr=" + gateway_->address();
  const std::string fifo = dir_.path() + "/go";
  const std::string token_file = dir_.path() + "/token";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string out;
  int first_rc = -1;
  std::thread first([&] {
    first_rc = testing::RunCommand(
        {FENCECTL_BIN, addr, "lock", "jobs", "--", "/bin/sh", "-c",
         absl::StrCat("echo $FENCEGATE_TOKEN > ", token_file, ".tmp && mv ",
                      token_file, ".tmp ", token_file, " && cat ", fifo,
                      " > /dev/null && ", FENCECTL_BIN,
                      " write --domain \"$FENCEGATE_DOMAIN\" --token "
                      "\"$FENCEGATE_TOKEN\" --resource files/report.txt "
                      "--put from-lock")},
        &out);
  });
  ASSERT_TRUE(testing::WaitFor([&] { return ReadFile(token_file).ok(); }));
  uint64_t token = 0;
  ASSERT_TRUE(absl::SimpleAtoi(
      absl::StripAsciiWhitespace(*ReadFile(token_file)), &token));
  EXPECT_EQ(Fence("jobs"), token);
  // While it is held, a second fencectl lock that will not wait fails with 6.
  EXPECT_EQ(testing::RunCommand({FENCECTL_BIN, addr, "lock", "--wait-ms=0",
                                 "jobs", "--", "/bin/true"},
                                &out),
            6);
  testing::WriteFileOrDie(fifo, "go\n");
  first.join();
  EXPECT_EQ(first_rc, 0);
  EXPECT_EQ(Report(), "from-lock");
  // Released on exit: the next holder gets the next token at once.
  EXPECT_EQ(Acquire("jobs", 60000).token(), token + 1);
}

}  // namespace
}  // namespace fencegate
