// Copyright fencegate authors.
//
// A Write of long SQL text is checked (its statements parsed and
// classified) on the long-text parser's thread, never on gRPC's: while one
// is being checked, other calls are served (docs/operations.md, "Limits").

#include <pthread.h>

#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "fencegate/v1/gateway.grpc.pb.h"
#include "gateway/config.h"
#include "gateway/server.h"
#include "gateway/write_request.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "storage_adapters/builtin.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

// An adapter whose Validate of a long Write notes its thread's name and
// holds it until released: a check still running.
class HeldCheckAdapter : public StorageAdapter {
 public:
  absl::Status Validate(const WriteTarget&,
                        const Operations& ops) const override {
    size_t bytes = 0;
    for (const v1::Operation& op : ops) bytes += op.sql().sql().size();
    if (bytes > kInlineCheckSqlBytes) {
      char name[16] = {};
      pthread_getname_np(pthread_self(), name, sizeof(name));
      thread_name = name;
      entered.Notify();
      release.WaitForNotification();
    }
    return absl::OkStatus();
  }
  absl::Status Apply(const WriteTarget&, const Operations& ops,
                     OpResults* results) override {
    for (int i = 0; i < ops.size(); ++i) results->Add();
    return absl::OkStatus();
  }
  mutable std::string thread_name;
  mutable absl::Notification entered, release;
};

TEST(GatewayLongSqlTest, ALongWriteIsCheckedOffGrpcsThreads) {
  testing::TempDir dir;
  auto* held = new HeldCheckAdapter();  // Owned by the router.
  AdapterRegistry registry;
  ASSERT_OK(RegisterBuiltinAdapters(&registry));
  ASSERT_OK(
      registry.Register("held", [held](const Uri&, const AdapterContext&) {
        return absl::StatusOr<std::unique_ptr<StorageAdapter>>(
            std::unique_ptr<StorageAdapter>(held));
      }));
  v1::GatewayConfig config;
  config.set_listen_address("127.0.0.1:0");
  config.set_data_dir(dir.path());
  ASSERT_OK_AND_ASSIGN(options, ResolveOptions(config));
  options.routes = {{"db", "held://"},
                    {"files", "file://" + dir.path() + "/files"}};
  TokenWatcherRegistry watchers;  // None configured.
  ASSERT_OK_AND_ASSIGN(server,
                       GatewayServer::Start(options, registry, watchers));
  auto stub = v1::Gateway::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", server->port()),
                          grpc::InsecureChannelCredentials()));

  v1::WriteRequest long_write;
  long_write.set_domain("long");
  long_write.set_token(1);
  long_write.set_resource("db/jobs");
  long_write.add_ops()->mutable_sql()->set_sql(
      "SELECT 1" + std::string(kInlineCheckSqlBytes, ' '));
  grpc::Status long_status;
  std::thread long_caller([&] {
    v1::WriteResponse response;
    grpc::ClientContext context;
    long_status = stub->Write(&context, long_write, &response);
  });
  held->entered.WaitForNotification();
  EXPECT_EQ(held->thread_name, "fg-sql-parse");

  // While it is held there, a small Write and a GetFence are answered.
  v1::WriteRequest small;
  small.set_domain("small");
  small.set_token(1);
  small.set_resource("files/small.txt");
  small.add_ops()->mutable_put()->set_data("x");
  {
    v1::WriteResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(30));
    EXPECT_TRUE(stub->Write(&context, small, &response).ok());
  }
  {
    v1::GetFenceRequest request;
    request.set_domain("small");
    v1::FenceState response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(30));
    ASSERT_TRUE(stub->GetFence(&context, request, &response).ok());
    EXPECT_EQ(response.highest_token(), 1u);
  }
  held->release.Notify();
  long_caller.join();
  EXPECT_TRUE(long_status.ok()) << long_status.error_message();
  server->Shutdown(absl::Seconds(30));
}

}  // namespace
}  // namespace fencegate
