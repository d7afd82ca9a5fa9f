// Copyright fencegate authors.
//
// Graceful shutdown, in process: a write in flight when shutdown starts
// finishes and is acknowledged; requests arriving after it are refused.

#include <memory>
#include <thread>

#include "absl/synchronization/notification.h"
#include "fencegate/v1/gateway.grpc.pb.h"
#include "gateway/config.h"
#include "gateway/server.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "storage_adapters/builtin.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

// An adapter whose Apply blocks until released: a write held in flight.
class BlockingAdapter : public StorageAdapter {
 public:
  absl::Status Validate(const WriteTarget&, const Operations&) const override {
    return absl::OkStatus();
  }
  absl::Status Apply(const WriteTarget&, const Operations& ops,
                     OpResults* results) override {
    entered.Notify();
    release.WaitForNotification();
    for (int i = 0; i < ops.size(); ++i) results->Add();
    applied = true;
    return absl::OkStatus();
  }
  absl::Notification entered, release;
  std::atomic<bool> applied{false};
};

TEST(GatewayShutdownTest, InFlightWriteFinishesAndNewOnesAreRefused) {
  testing::TempDir dir;
  auto* blocking = new BlockingAdapter();  // Owned by the router.
  AdapterRegistry registry;
  ASSERT_OK(RegisterBuiltinAdapters(&registry));
  ASSERT_OK(
      registry.Register("block", [blocking](const Uri&, const AdapterContext&) {
        return absl::StatusOr<std::unique_ptr<StorageAdapter>>(
            std::unique_ptr<StorageAdapter>(blocking));
      }));
  v1::GatewayConfig config;
  config.set_listen_address("127.0.0.1:0");
  config.set_data_dir(dir.path());
  ASSERT_OK_AND_ASSIGN(options, ResolveOptions(config));
  options.routes = {{"slow", "block://"},
                    {"files", "file://" + dir.path() + "/files"}};
  options.io_threads = 4;
  TokenWatcherRegistry watchers;  // None configured.
  ASSERT_OK_AND_ASSIGN(server,
                       GatewayServer::Start(options, registry, watchers));
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server->port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::Gateway::NewStub(channel);

  v1::WriteRequest request;
  request.set_domain("jobs");
  request.set_token(1);
  request.set_resource("slow/x");
  request.add_ops()->mutable_put()->set_data("x");
  grpc::Status in_flight_status;
  std::thread in_flight([&] {
    v1::WriteResponse response;
    grpc::ClientContext context;
    in_flight_status = stub->Write(&context, request, &response);
  });
  blocking->entered.WaitForNotification();

  std::thread shutdown([&] { server->Shutdown(absl::Seconds(60)); });
  // Once shutdown has begun, a new write is refused and applies nothing.
  // Each attempt writes a file of its own, in a domain of its own (not
  // queued behind the in-flight write): attempts made before shutdown
  // began land, the refused one must not.
  grpc::Status refused;
  int attempt = 0;
  ASSERT_TRUE(testing::WaitFor([&] {
    auto fresh = v1::Gateway::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", server->port()),
                            grpc::InsecureChannelCredentials()));
    v1::WriteRequest late = request;
    late.set_domain("late");
    late.set_resource(absl::StrCat("files/late", ++attempt));
    v1::WriteResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(2));
    refused = fresh->Write(&context, late, &response);
    // gRPC cancels calls that arrive while the server shuts down, and
    // refuses connections once its listener is closed. The client's own
    // deadline is no refusal: on a loaded machine it may run out while
    // the write is still being applied, so that attempt is not the one
    // checked.
    return refused.error_code() == grpc::StatusCode::CANCELLED ||
           refused.error_code() == grpc::StatusCode::UNAVAILABLE;
  })) << refused.error_message();
  // The refused write is not applied (the file is checked below, after the
  // server is down).

  blocking->release.Notify();
  in_flight.join();
  shutdown.join();
  EXPECT_TRUE(in_flight_status.ok()) << in_flight_status.error_message();
  EXPECT_TRUE(blocking->applied);
  EXPECT_FALSE(
      testing::ReadFile(absl::StrCat(dir.path(), "/files/late", attempt)).ok());
}

}  // namespace
}  // namespace fencegate
