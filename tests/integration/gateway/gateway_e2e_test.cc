// Copyright fencegate authors.
//
// End to end through a real fencegate process on a free loopback port:
// gRPC clients, fencectl, kill -9 and restart.

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "fencegate/v1/errors.pb.h"
#include "fencegate/v1/gateway.grpc.pb.h"
#include "google/rpc/status.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

using ::fencegate::testing::GatewayProcess;
using ::fencegate::testing::ReadFile;
using ::fencegate::testing::RunCommand;
using ::testing::HasSubstr;

class GatewayE2eTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(); }

  void Start(const std::vector<std::string>& args = {}) {
    stub_.reset();
    gateway_.reset();
    auto gateway = GatewayProcess::Start(data_dir(), args);
    ASSERT_TRUE(gateway.ok()) << gateway.status();
    gateway_ = *std::move(gateway);
    channel_ = grpc::CreateChannel(gateway_->address(),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::Gateway::NewStub(channel_);
  }

  std::string data_dir() const { return dir_.path() + "/data"; }
  std::string FilePath(const std::string& rel) const {
    return data_dir() + "/files/" + rel;
  }

  grpc::Status Write(const std::string& domain, uint64_t token,
                     const std::string& resource, const std::string& data,
                     v1::WriteResponse* response = nullptr) {
    v1::WriteRequest request;
    request.set_domain(domain);
    request.set_token(token);
    request.set_resource(resource);
    request.add_ops()->mutable_put()->set_data(data);
    v1::WriteResponse local;
    grpc::ClientContext context;
    return stub_->Write(&context, request, response ? response : &local);
  }
  grpc::Status Call(const v1::WriteRequest& request) {
    v1::WriteResponse response;
    grpc::ClientContext context;
    return stub_->Write(&context, request, &response);
  }
  grpc::Status Fence(const std::string& domain, uint64_t token,
                     v1::FenceState* state = nullptr) {
    v1::FenceRequest request;
    request.set_domain(domain);
    request.set_token(token);
    v1::FenceState local;
    grpc::ClientContext context;
    return stub_->Fence(&context, request, state ? state : &local);
  }
  uint64_t Highest(const std::string& domain) {
    v1::GetFenceRequest request;
    request.set_domain(domain);
    v1::FenceState state;
    grpc::ClientContext context;
    grpc::Status status = stub_->GetFence(&context, request, &state);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return state.highest_token();
  }
  // The StaleToken detail of a FAILED_PRECONDITION, read the way any gRPC
  // client reads the rich error model.
  static v1::StaleToken StaleDetail(const grpc::Status& status) {
    google::rpc::Status rich;
    EXPECT_TRUE(rich.ParseFromString(status.error_details()));
    v1::StaleToken detail;
    EXPECT_EQ(rich.details_size(), 1);
    if (rich.details_size() == 1) {
      EXPECT_TRUE(rich.details(0).UnpackTo(&detail));
    }
    return detail;
  }

  testing::TempDir dir_;
  std::unique_ptr<GatewayProcess> gateway_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Gateway::Stub> stub_;
};

TEST_F(GatewayE2eTest, StaleWriteIsRejectedAndFileUntouched) {
  v1::WriteResponse response;
  ASSERT_TRUE(Write("jobs", 5, "files/out.txt", "from 5", &response).ok());
  EXPECT_TRUE(response.fence_advanced());
  EXPECT_EQ(response.fence().highest_token(), 5u);
  ASSERT_EQ(response.results_size(), 1);
  EXPECT_EQ(response.results(0).file().size(), 6u);

  grpc::Status stale = Write("jobs", 4, "files/out.txt", "from 4");
  EXPECT_EQ(stale.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  v1::StaleToken detail = StaleDetail(stale);
  EXPECT_EQ(detail.domain(), "jobs");
  EXPECT_EQ(detail.token(), 4u);
  EXPECT_EQ(detail.highest_token(), 5u);
  EXPECT_EQ(*ReadFile(FilePath("out.txt")), "from 5");

  ASSERT_TRUE(Write("jobs", 5, "files/out.txt", "again 5").ok());  // Equal.
  EXPECT_EQ(*ReadFile(FilePath("out.txt")), "again 5");

  // The rejection is in the log with domain, token and highest token.
  ASSERT_TRUE(::fencegate::testing::WaitFor([&] {
    auto log = ReadFile(gateway_->log_path());
    return log.ok() && log->find(
                           "rejected stale token domain=\"jobs\" "
                           "token=4 highest=5") != std::string::npos;
  }));
}

TEST_F(GatewayE2eTest, FenceShutsOutOldHolderEverywhere) {
  ASSERT_TRUE(Write("nightly", 3, "files/a.txt", "old holder").ok());
  // A new holder takes the lock and fences before writing anything.
  v1::FenceState state;
  ASSERT_TRUE(Fence("nightly", 4, &state).ok());
  EXPECT_EQ(state.highest_token(), 4u);
  EXPECT_TRUE(state.has_advanced_at());
  // The old holder now tries a resource the new holder never touched.
  grpc::Status late = Write("nightly", 3, "files/b.txt", "late");
  EXPECT_EQ(late.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_FALSE(ReadFile(FilePath("b.txt")).ok());
  // Fencing with a lower token is itself stale.
  grpc::Status low = Fence("nightly", 2);
  EXPECT_EQ(low.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(StaleDetail(low).highest_token(), 4u);
}

TEST_F(GatewayE2eTest, FenceStateSurvivesKill9) {
  ASSERT_TRUE(Fence("billing", 10).ok());
  ASSERT_TRUE(Write("billing", 11, "files/bill.csv", "run 11").ok());
  const int status = gateway_->Stop(SIGKILL);
  ASSERT_TRUE(WIFSIGNALED(status));
  Start();
  EXPECT_EQ(Highest("billing"), 11u);
  grpc::Status stale = Write("billing", 10, "files/bill.csv", "run 10");
  EXPECT_EQ(stale.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(*ReadFile(FilePath("bill.csv")), "run 11");
}

// Advances to the no-op route are decided on gRPC's thread and queued to
// the fence store's commit thread, which syncs many at once and only then
// lets them be acknowledged. Killed in the middle of such a stream, the
// gateway comes back with every acknowledged advance.
TEST_F(GatewayE2eTest, AcknowledgedAdvancesSurviveKill9UnderLoad) {
  const std::vector<std::string> args = {
      "--route=files=file://" + data_dir() + "/files", "--route=noop=noop://"};
  Start(args);
  constexpr int kDomains = 8;
  std::vector<std::atomic<uint64_t>> acked(kDomains);
  std::atomic<int> total{0};
  std::vector<std::thread> writers;
  for (int d = 0; d < kDomains; ++d) {
    writers.emplace_back([&, d] {
      for (uint64_t token = 1;; ++token) {
        if (!Write(absl::StrCat("k", d), token, "noop/x", "v").ok()) return;
        acked[d].store(token);
        total.fetch_add(1);
      }
    });
  }
  EXPECT_TRUE(testing::WaitFor([&] { return total.load() >= 400; }));
  const int status = gateway_->Stop(SIGKILL);
  for (std::thread& t : writers) t.join();
  ASSERT_TRUE(WIFSIGNALED(status));
  Start(args);
  for (int d = 0; d < kDomains; ++d) {
    SCOPED_TRACE(d);
    EXPECT_GT(acked[d].load(), 0u);
    EXPECT_GE(Highest(absl::StrCat("k", d)), acked[d].load());
  }
}

TEST_F(GatewayE2eTest, SigtermStopsCleanlyAndKeepsState) {
  ASSERT_TRUE(Fence("cron", 7).ok());
  const int status = gateway_->Stop(SIGTERM);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  Start();
  EXPECT_EQ(Highest("cron"), 7u);
}

TEST_F(GatewayE2eTest, MalformedRequestsAreInvalidArgument) {
  v1::WriteRequest base;
  base.set_domain("d");
  base.set_token(1);
  base.set_resource("files/x");
  base.add_ops()->mutable_put()->set_data("x");

  auto expect_invalid = [&](v1::WriteRequest request, const char* field) {
    grpc::Status s = Call(request);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << field;
    EXPECT_THAT(s.error_message(), HasSubstr(field));
  };
  v1::WriteRequest r = base;
  r.set_token(0);
  expect_invalid(r, "token");
  r = base;
  r.clear_ops();
  expect_invalid(r, "ops");
  r = base;
  r.set_resource("nowhere/x");
  expect_invalid(r, "unknown route");
  r = base;
  r.set_resource("files/../escape");
  expect_invalid(r, "resource");
  r = base;
  r.set_domain(std::string(513, 'd'));
  expect_invalid(r, "domain");
  r = base;
  r.mutable_ops(0)->clear_op();
  expect_invalid(r, "ops[0]");
  // A file Write with a seq takes one operation.
  r = base;
  r.set_seq(1);
  r.add_ops()->mutable_append()->set_data("y");
  expect_invalid(r, "seq");
  // Each path rule is checked before the fence moves: a segment longer
  // than the file system allows, a reserved name as a directory.
  r = base;
  r.set_resource("files/" + std::string(256, 'n') + "/x");
  expect_invalid(r, "exceeds the file system's limit");
  r = base;
  r.set_resource("files/.fencegate-tmp-1/x");
  expect_invalid(r, "reserved");
  r = base;
  r.set_request_id(std::string(257, 'r'));
  expect_invalid(r, "request_id");
  r = base;
  r.set_resource("files/" + std::string(4096, 'n'));
  expect_invalid(r, "resource: 4102 bytes exceed the 4096-byte limit");
  // Bytes that are not UTF-8 in a string field: refused by the gateway,
  // naming the field (not by the parser, with an error naming nothing).
  r = base;
  r.set_domain("bad\xff\xfe");
  expect_invalid(r, "domain: not valid UTF-8");
  r = base;
  r.set_resource("files/\xc3\x28");
  expect_invalid(r, "resource: not valid UTF-8");
  r = base;
  r.set_request_id("id\x80");
  expect_invalid(r, "request_id: not valid UTF-8");
  {
    v1::GetFenceRequest get;
    get.set_domain("\xed\xa0\x80");  // A UTF-16 surrogate.
    v1::FenceState state;
    grpc::ClientContext context;
    grpc::Status s = stub_->GetFence(&context, get, &state);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("domain: not valid UTF-8"));
  }
  v1::FenceRequest fence;
  fence.set_domain("d");
  fence.set_token(7);
  fence.set_request_id(std::string(10 << 20, 'r'));
  v1::FenceState state;
  grpc::ClientContext context;
  grpc::Status long_id = stub_->Fence(&context, fence, &state);
  EXPECT_EQ(long_id.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(long_id.error_message(), HasSubstr("request_id"));
  // Nothing was applied and no fence moved.
  EXPECT_FALSE(ReadFile(FilePath("x")).ok());
  EXPECT_EQ(Highest("d"), 0u);
}

TEST_F(GatewayE2eTest, EmptyDomainMeansTheResource) {
  ASSERT_TRUE(Write("", 5, "files/own.txt", "five").ok());
  EXPECT_EQ(Highest("files/own.txt"), 5u);
  EXPECT_EQ(Write("", 4, "files/own.txt", "four").error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(*ReadFile(FilePath("own.txt")), "five");
}

TEST_F(GatewayE2eTest, TokenEdgeValuesOverTheWire) {
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  ASSERT_TRUE(Write("edge", uint64_t{1} << 63, "files/e", "2^63").ok());
  ASSERT_TRUE(Write("edge", max, "files/e", "max").ok());
  EXPECT_EQ(Highest("edge"), max);
  EXPECT_EQ(Write("edge", max - 1, "files/e", "no").error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(*ReadFile(FilePath("e")), "max");
}

TEST_F(GatewayE2eTest, LimitsAreEnforced) {
  Start({"--max_ops_per_write=2", "--max_message_bytes=2048"});
  v1::WriteRequest r;
  r.set_domain("d");
  r.set_token(1);
  r.set_resource("files/x");
  for (int i = 0; i < 3; ++i) r.add_ops()->mutable_append()->set_data("x");
  grpc::Status too_many = Call(r);
  EXPECT_EQ(too_many.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(too_many.error_message(), HasSubstr("limit of 2"));
  grpc::Status too_big = Write("d", 1, "files/x", std::string(4096, 'x'));
  EXPECT_EQ(too_big.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_FALSE(ReadFile(FilePath("x")).ok());
}

// SQL parameters cost many times their bytes once parsed: a Write may carry
// kMaxSqlParamsPerWrite in all, counted on the wire before anything is
// built (docs/operations.md, "Limits").
TEST_F(GatewayE2eTest, SqlParametersAreCountedBeforeTheyAreBuilt) {
  Start();
  v1::WriteRequest r;
  r.set_domain("d");
  r.set_token(1);
  r.set_resource("files/x");
  for (int op = 0; op < 2; ++op) {
    v1::SqlStatement* sql = r.add_ops()->mutable_sql();
    sql->set_sql("SELECT 1");
    for (int i = 0; i < 40000; ++i) sql->add_params()->set_text("");
  }
  grpc::Status refused = Call(r);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(),
              HasSubstr("80000 SQL parameters in all exceed the limit of "
                        "65535 per Write"));
  EXPECT_EQ(Highest("d"), 0u);
}

// Each connection costs a file descriptor and the fence store must always
// open its next file: the gateway raises its soft limit to the hard one
// and says so.
TEST_F(GatewayE2eTest, StartUpRaisesTheFileDescriptorLimit) {
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  if (saved.rlim_max != RLIM_INFINITY && saved.rlim_max <= 512) {
    GTEST_SKIP() << "hard limit too low to lower the soft one";
  }
  rlimit low = saved;
  low.rlim_cur = 512;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  Start();  // Inherits the low soft limit.
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  std::ifstream limits(absl::StrCat("/proc/", gateway_->pid(), "/limits"));
  std::string line;
  std::string open_files;
  while (std::getline(limits, line)) {
    if (absl::StartsWith(line, "Max open files")) open_files = line;
  }
  const std::string hard = saved.rlim_max == RLIM_INFINITY
                               ? "unlimited"
                               : absl::StrCat(saved.rlim_max);
  EXPECT_THAT(open_files, HasSubstr(hard + " ")) << open_files;
  EXPECT_THAT(open_files, ::testing::Not(HasSubstr(" 512 "))) << open_files;
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        absl::StatusOr<std::string> log = ReadFile(gateway_->log_path());
        return log.ok() && absl::StrContains(*log, "raised from 512");
      },
      absl::Seconds(10)));
}

// A 16 MiB request of 8 million empty operations is refused by counting
// them on the wire, without building them: the gateway's peak memory stays
// far below the ~500 MB that parsing them would take.
TEST_F(GatewayE2eTest, ManyEmptyOperationsAreRefusedBeforeTheyAreBuilt) {
  v1::WriteRequest head;
  head.set_domain("many");
  head.set_token(1);
  head.set_resource("files/many");
  std::string bytes = head.SerializeAsString();
  constexpr size_t kOps = 8000000;
  bytes.reserve(bytes.size() + 2 * kOps);
  for (size_t i = 0; i < kOps; ++i) bytes.append("\x22\x00", 2);  // ops: {}
  ASSERT_LT(bytes.size(), size_t{16} << 20);
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::GenericStub generic(channel_);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(60));
  absl::Notification done;
  grpc::Status status;
  generic.UnaryCall(&context, "/fencegate.v1.Gateway/Write",
                    grpc::StubOptions(), &request, &response,
                    [&](grpc::Status s) {
                      status = std::move(s);
                      done.Notify();
                    });
  done.WaitForNotification();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              HasSubstr("8000000 operations exceed the limit of 1000"));
  const double peak =
      static_cast<double>(testing::ProcStatusKb(gateway_->pid(), "VmHWM")) /
      1024.0;
  EXPECT_GT(peak, 0);
  EXPECT_LT(peak, 200) << "peak RSS " << peak << " MiB";
  EXPECT_EQ(Highest("many"), 0u);
}

// Sequence hands out each token once, rising, and raises the fence to it.
TEST_F(GatewayE2eTest, SequenceIssuesUniqueRisingTokens) {
  ASSERT_TRUE(Fence("seq", 100).ok());
  constexpr int kThreads = 8, kEach = 10;
  std::vector<std::vector<uint64_t>> issued(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto stub = v1::Gateway::NewStub(channel_);
      uint64_t last = 0;
      for (int i = 0; i < kEach; ++i) {
        v1::SequenceRequest request;
        request.set_domain("seq");
        v1::FenceState state;
        grpc::ClientContext context;
        grpc::Status s = stub->Sequence(&context, request, &state);
        EXPECT_TRUE(s.ok()) << s.error_message();
        EXPECT_GT(state.highest_token(), last);  // Rising for each caller.
        last = state.highest_token();
        issued[t].push_back(last);
      }
    });
  }
  for (auto& t : threads) t.join();
  std::vector<uint64_t> all;
  for (const auto& v : issued) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end());
  ASSERT_EQ(all.size(), size_t{kThreads * kEach});
  EXPECT_EQ(all.front(), 101u);
  EXPECT_EQ(all.back(), 100u + kThreads * kEach);
  EXPECT_EQ(Highest("seq"), all.back());
  // An earlier token is stale now; fencectl prints the next one.
  EXPECT_EQ(Write("seq", all.front(), "files/seq", "late").error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  std::string out;
  EXPECT_EQ(RunCommand({FENCECTL_BIN, "--addr=" + gateway_->address(),
                        "sequence", "--domain=seq"},
                       &out),
            0);
  EXPECT_EQ(out, absl::StrCat(all.back() + 1, "\n"));
}

TEST_F(GatewayE2eTest, HealthAndReflectionAnswer) {
  auto health = grpc::health::v1::Health::NewStub(channel_);
  for (const char* service : {"", "fencegate.v1.Gateway"}) {
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse response;
    grpc::ClientContext context;
    ASSERT_TRUE(health->Check(&context, request, &response).ok()) << service;
    EXPECT_EQ(response.status(),
              grpc::health::v1::HealthCheckResponse::SERVING);
  }

  auto reflection =
      grpc::reflection::v1alpha::ServerReflection::NewStub(channel_);
  grpc::ClientContext context;
  auto stream = reflection->ServerReflectionInfo(&context);
  grpc::reflection::v1alpha::ServerReflectionRequest request;
  request.set_list_services("");
  ASSERT_TRUE(stream->Write(request));
  stream->WritesDone();
  grpc::reflection::v1alpha::ServerReflectionResponse response;
  ASSERT_TRUE(stream->Read(&response));
  std::vector<std::string> names;
  for (const auto& s : response.list_services_response().service()) {
    names.push_back(s.name());
  }
  EXPECT_THAT(names, ::testing::IsSupersetOf(
                         {"fencegate.v1.Gateway", "grpc.health.v1.Health"}));
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(GatewayE2eTest, SecondGatewayOnSameDataDirRefusesToStart) {
  auto second = GatewayProcess::Start(data_dir());
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().message(), HasSubstr("lock"));
}

TEST_F(GatewayE2eTest, FencectlExitCodes) {
  const std::string addr = "--addr=" + gateway_->address();
  std::string out, err;
  EXPECT_EQ(RunCommand({FENCECTL_BIN, addr, "write", "--domain=jobs",
                        "--token=5", "--resource=files/cli.txt", "--put=hello"},
                       &out, &err),
            0)
      << err;
  EXPECT_THAT(out, HasSubstr("highest_token=5"));
  err.clear();
  EXPECT_EQ(RunCommand({FENCECTL_BIN, addr, "write", "--domain=jobs",
                        "--token=4", "--resource=files/cli.txt", "--put=late"},
                       &out, &err),
            3);
  EXPECT_THAT(err, HasSubstr("stale token 4"));
  EXPECT_THAT(err, HasSubstr("highest token is 5"));
  EXPECT_EQ(*ReadFile(FilePath("cli.txt")), "hello");

  EXPECT_EQ(
      RunCommand({FENCECTL_BIN, addr, "fence", "--domain=jobs", "--token=9"},
                 &out),
      0);
  out.clear();
  EXPECT_EQ(
      RunCommand({FENCECTL_BIN, addr, "--json", "get", "--domain=jobs"}, &out),
      0);
  EXPECT_THAT(out, HasSubstr("\"highest_token\":\"9\""));
  EXPECT_EQ(RunCommand({FENCECTL_BIN, addr, "write", "--domain=jobs",
                        "--token=9", "--resource=nope/x", "--put=x"},
                       &out),
            4);
  EXPECT_EQ(RunCommand({FENCECTL_BIN, addr, "write", "--token=abc",
                        "--resource=files/x", "--put=x"},
                       &out),
            2);
  EXPECT_EQ(RunCommand({FENCECTL_BIN, addr, "write", "--token=1",
                        "--resource=files/x"},
                       &out),
            2);
  for (const char* token : {"--token=0", "--token=+5", "--token= 5",
                            "--token=18446744073709551616"}) {
    EXPECT_EQ(
        RunCommand({FENCECTL_BIN, addr, "fence", "--domain=jobs", token}, &out),
        2)
        << token;
  }
  EXPECT_EQ(
      RunCommand({FENCECTL_BIN, addr, "--timeout=0", "get", "--domain=jobs"},
                 &out),
      2);
  EXPECT_EQ(RunCommand({FENCECTL_BIN, "--addr=127.0.0.1:1", "--timeout=2",
                        "get", "--domain=jobs"},
                       &out),
            5);
}

// Preconditions over the wire (docs/fencing.md, rule 15): the result
// carries the file's version, a failed precondition its own detail naming
// the resource, and fencectl its own exit code; routes without versions
// refuse them.
TEST_F(GatewayE2eTest, PreconditionsOverTheWire) {
  Start({"--route=files=file://" + data_dir() + "/files",
         "--route=noop=noop://"});
  const std::string addr = "--addr=" + gateway_->address();
  auto write = [&](std::vector<std::string> flags, std::string* out,
                   std::string* err) {
    std::vector<std::string> argv = {FENCECTL_BIN, addr,
                                     "write",      "--domain=jobs",
                                     "--token=5",  "--resource=files/v.txt"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return RunCommand(argv, out, err);
  };
  std::string out, err;
  ASSERT_EQ(write({"--put=one", "--if-absent"}, &out, &err), 0) << err;
  EXPECT_THAT(out, HasSubstr("version=1"));
  EXPECT_EQ(write({"--put=two", "--if-absent"}, &out, &err), 11);
  EXPECT_THAT(err, HasSubstr("precondition if-absent failed: files/v.txt "
                             "exists, version 1"));
  EXPECT_EQ(write({"--put=two", "--if-version=0"}, &out, &err), 11);
  EXPECT_EQ(write({"--put=two", "--if-version=0", "--if-absent"}, &out, &err),
            2);
  out.clear();
  ASSERT_EQ(write({"--append=+", "--if-version=1"}, &out, &err), 0) << err;
  EXPECT_THAT(out, HasSubstr("version=2"));
  EXPECT_EQ(*ReadFile(FilePath("v.txt")), "one+");

  v1::WriteRequest request;
  request.set_domain("jobs");
  request.set_token(5);
  request.set_resource("files/v.txt");
  request.add_ops()->mutable_put()->set_data("lost update");
  request.mutable_ops(0)->set_if_version(1);
  grpc::Status failed = Call(request);
  ASSERT_EQ(failed.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  google::rpc::Status rich;
  ASSERT_TRUE(rich.ParseFromString(failed.error_details()));
  ASSERT_EQ(rich.details_size(), 1);
  v1::PreconditionFailed detail;
  ASSERT_TRUE(rich.details(0).UnpackTo(&detail));
  EXPECT_EQ(detail.resource(), "files/v.txt");
  EXPECT_EQ(detail.expected_version(), 1u);
  EXPECT_TRUE(detail.exists());
  EXPECT_EQ(detail.version(), 2u);
  EXPECT_EQ(*ReadFile(FilePath("v.txt")), "one+");

  request.set_resource("noop/v.txt");
  grpc::Status refused = Call(request);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(), HasSubstr("keeps no file versions"));
}

}  // namespace
}  // namespace fencegate
