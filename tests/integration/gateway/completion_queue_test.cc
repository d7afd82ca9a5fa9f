// Copyright fencegate authors.
//
// The gRPC API on the gateway's completion queues, in process: a Write
// whose client gave up while it waited for its domain is not applied; many
// domains' Writes spread over several queue threads land in order per
// domain; the health service (the gateway's own, on the queues) answers
// Check and Watch as gRPC's default does, and a shutdown ends its Watch
// calls rather than waiting for them.

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "fencegate/v1/gateway.grpc.pb.h"
#include "gateway/config.h"
#include "gateway/server.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "storage_adapters/builtin.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// An adapter whose first Apply blocks until released; it counts applies.
class HoldingAdapter : public StorageAdapter {
 public:
  absl::Status Validate(const WriteTarget&, const Operations&) const override {
    return absl::OkStatus();
  }
  absl::Status Apply(const WriteTarget&, const Operations& ops,
                     OpResults* results) override {
    if (applies.fetch_add(1) == 0) {
      entered.Notify();
      release.WaitForNotification();
    }
    for (int i = 0; i < ops.size(); ++i) results->Add();
    return absl::OkStatus();
  }
  absl::Notification entered, release;
  std::atomic<int> applies{0};
};

class CompletionQueueTest : public ::testing::Test {
 protected:
  void Start(uint32_t queue_threads) {
    holding_ = new HoldingAdapter();  // Owned by the router.
    ASSERT_OK(RegisterBuiltinAdapters(&registry_));
    ASSERT_OK(registry_.Register(
        "hold", [a = holding_](const Uri&, const AdapterContext&) {
          return absl::StatusOr<std::unique_ptr<StorageAdapter>>(
              std::unique_ptr<StorageAdapter>(a));
        }));
    v1::GatewayConfig config;
    config.set_listen_address("127.0.0.1:0");
    config.set_data_dir(dir_.path());
    config.set_queue_threads(queue_threads);
    ASSERT_OK_AND_ASSIGN(options, ResolveOptions(config));
    options.routes = {{"held", "hold://"},
                      {"files", "file://" + dir_.path() + "/files"}};
    absl::StatusOr<std::unique_ptr<GatewayServer>> started =
        GatewayServer::Start(options, registry_, watchers_);
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = *std::move(started);
  }

  // A channel with a TCP connection of its own (so that calls spread over
  // the queues, which gRPC assigns per connection).
  std::shared_ptr<grpc::Channel> OwnChannel() const {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return grpc::CreateCustomChannel(
        absl::StrCat("127.0.0.1:", server_->port()),
        grpc::InsecureChannelCredentials(), args);
  }

  testing::TempDir dir_;
  AdapterRegistry registry_;
  TokenWatcherRegistry watchers_;
  HoldingAdapter* holding_ = nullptr;
  std::unique_ptr<GatewayServer> server_;
};

v1::WriteRequest WriteOf(const std::string& domain, uint64_t token,
                         const std::string& resource) {
  v1::WriteRequest request;
  request.set_domain(domain);
  request.set_token(token);
  request.set_resource(resource);
  request.add_ops()->mutable_put()->set_data("x");
  return request;
}

TEST_F(CompletionQueueTest,
       AWriteWhoseDeadlinePassedInItsDomainsLineIsNotApplied) {
  ASSERT_NO_FATAL_FAILURE(Start(2));
  auto stub = v1::Gateway::NewStub(OwnChannel());
  grpc::Status first_status;
  std::thread first([&] {
    v1::WriteResponse response;
    grpc::ClientContext context;
    first_status = stub->Write(&context, WriteOf("d", 1, "held/a"), &response);
  });
  holding_->entered.WaitForNotification();
  // Queued behind the first in the domain's line until its deadline.
  {
    v1::WriteResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(300));
    const grpc::Status late =
        stub->Write(&context, WriteOf("d", 1, "held/b"), &response);
    EXPECT_EQ(late.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
        << late.error_message();
  }
  // The gateway's copy of the deadline passes just after the client's
  // (it counts from the call's arrival): a margin before the domain's line
  // moves on.
  absl::SleepFor(absl::Seconds(1));
  holding_->release.Notify();
  first.join();
  EXPECT_TRUE(first_status.ok()) << first_status.error_message();
  // A Write of the domain after both: the line moved on past the one that
  // gave up, which was never applied.
  v1::WriteResponse response;
  grpc::ClientContext context;
  ASSERT_TRUE(stub->Write(&context, WriteOf("d", 1, "held/c"), &response).ok());
  EXPECT_EQ(holding_->applies.load(), 2);
}

TEST_F(CompletionQueueTest, ManyDomainsOverSeveralQueuesLandInOrderPerDomain) {
  ASSERT_NO_FATAL_FAILURE(Start(4));
  constexpr int kDomains = 16;
  constexpr int kWrites = 20;
  std::vector<std::thread> writers;
  std::vector<std::string> errors(kDomains);
  for (int d = 0; d < kDomains; ++d) {
    writers.emplace_back([&, d] {
      auto stub = v1::Gateway::NewStub(OwnChannel());
      for (int i = 1; i <= kWrites; ++i) {
        // Each Write raises its domain's fence: one out of order would be
        // refused as stale.
        v1::WriteRequest request;
        request.set_domain(absl::StrCat("dom", d));
        request.set_token(i);
        request.set_resource(absl::StrCat("files/dom", d));
        request.add_ops()->mutable_append()->set_data(absl::StrCat(i, "\n"));
        v1::WriteResponse response;
        grpc::ClientContext context;
        const grpc::Status s = stub->Write(&context, request, &response);
        if (!s.ok()) {
          errors[d] = absl::StrCat("write ", i, ": ", s.error_message());
          return;
        }
      }
    });
  }
  for (std::thread& t : writers) t.join();
  for (int d = 0; d < kDomains; ++d) {
    EXPECT_EQ(errors[d], "") << "domain " << d;
    std::string expected;
    for (int i = 1; i <= kWrites; ++i) absl::StrAppend(&expected, i, "\n");
    EXPECT_EQ(testing::ReadFile(absl::StrCat(dir_.path(), "/files/dom", d))
                  .value_or("missing"),
              expected);
  }
}

TEST_F(CompletionQueueTest, HealthAnswersCheckAndWatchAndShutdownEndsAWatch) {
  ASSERT_NO_FATAL_FAILURE(Start(2));
  auto health = grpc::health::v1::Health::NewStub(OwnChannel());
  {
    HealthCheckRequest request;
    HealthCheckResponse response;
    grpc::ClientContext context;
    ASSERT_TRUE(health->Check(&context, request, &response).ok());
    EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  }
  {
    HealthCheckRequest request;
    request.set_service("route/files");
    HealthCheckResponse response;
    grpc::ClientContext context;
    ASSERT_TRUE(health->Check(&context, request, &response).ok());
    EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  }
  {
    HealthCheckRequest request;
    request.set_service("no.such.Service");
    HealthCheckResponse response;
    grpc::ClientContext context;
    EXPECT_EQ(health->Check(&context, request, &response).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  // A Watch of an unknown service hears so, and stays open.
  grpc::ClientContext unknown_context;
  HealthCheckRequest unknown_request;
  unknown_request.set_service("no.such.Service");
  auto unknown = health->Watch(&unknown_context, unknown_request);
  HealthCheckResponse heard;
  ASSERT_TRUE(unknown->Read(&heard));
  EXPECT_EQ(heard.status(), HealthCheckResponse::SERVICE_UNKNOWN);
  // A Watch of the server hears SERVING, then NOT_SERVING at shutdown, and
  // the shutdown ends the call (with OK: gRPC would have cancelled it only
  // at the end of the grace).
  grpc::ClientContext context;
  auto watch = health->Watch(&context, HealthCheckRequest());
  ASSERT_TRUE(watch->Read(&heard));
  EXPECT_EQ(heard.status(), HealthCheckResponse::SERVING);
  std::thread shutdown([&] { server_->Shutdown(absl::Seconds(60)); });
  ASSERT_TRUE(watch->Read(&heard));
  EXPECT_EQ(heard.status(), HealthCheckResponse::NOT_SERVING);
  EXPECT_FALSE(watch->Read(&heard));
  const grpc::Status ended = watch->Finish();
  EXPECT_TRUE(ended.ok()) << ended.error_message();
  // Its service is still unknown: nothing more to hear, and the call ends.
  EXPECT_FALSE(unknown->Read(&heard));
  const grpc::Status unknown_ended = unknown->Finish();
  EXPECT_TRUE(unknown_ended.ok()) << unknown_ended.error_message();
  shutdown.join();
}

}  // namespace
}  // namespace fencegate
