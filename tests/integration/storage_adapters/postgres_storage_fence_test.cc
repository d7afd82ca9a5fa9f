// Copyright fencegate authors.
//
// The fence kept in the database (docs/fencing.md, "The fence in the
// storage"): the PostgreSQL adapter's RaiseFence, NextFence and ReadFences,
// and gateways sharing one database -- a Fence or a lease grant through one
// shuts out a lower-token write through another, two gateways never grant
// one token, and a gateway whose fence store was lost or restored from an
// older copy starts with the database's fences.

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "fencegate/common/stale_token.h"
#include "fencegate/v1/errors.pb.h"
#include "fencegate/v1/gateway.grpc.pb.h"
#include "fencegate/v1/lease.grpc.pb.h"
#include "google/rpc/status.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "tests/fixtures.h"
#include "tests/postgres_adapter_fixture.h"

namespace fencegate {
namespace {

using ::fencegate::testing::GatewayProcess;
using ::fencegate::testing::StatusIs;
using ::testing::HasSubstr;

class PostgresStorageFenceTest : public PostgresAdapterTest {
 protected:
  static absl::StatusOr<std::unique_ptr<GatewayProcess>> StartGateway(
      const std::string& dir) {
    return GatewayProcess::Start(dir, {"--route=db=" + server_->Uri()});
  }
  static std::unique_ptr<v1::Gateway::Stub> Stub(GatewayProcess& g) {
    return v1::Gateway::NewStub(
        grpc::CreateChannel(g.address(), grpc::InsecureChannelCredentials()));
  }
  static grpc::Status Fence(GatewayProcess& g, uint64_t token,
                            v1::FenceState* state = nullptr) {
    v1::FenceRequest request;
    request.set_domain("billing-run");
    request.set_token(token);
    v1::FenceState local;
    grpc::ClientContext context;
    return Stub(g)->Fence(&context, request, state ? state : &local);
  }
  static uint64_t GetFence(GatewayProcess& g) {
    v1::GetFenceRequest request;
    request.set_domain("billing-run");
    v1::FenceState state;
    grpc::ClientContext context;
    grpc::Status s = Stub(g)->GetFence(&context, request, &state);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return state.highest_token();
  }
  static grpc::Status Write(GatewayProcess& g, uint64_t token,
                            const std::string& owner) {
    v1::WriteRequest request;
    request.set_domain("billing-run");
    request.set_token(token);
    request.set_resource("db/jobs");
    *request.add_ops() = Sql("INSERT INTO jobs (id, owner) VALUES ($1, $2)",
                             {Int(static_cast<int64_t>(token)), Text(owner)});
    v1::WriteResponse response;
    grpc::ClientContext context;
    return Stub(g)->Write(&context, request, &response);
  }
  static uint64_t Grant(GatewayProcess& g) {
    auto lease = v1::Lease::NewStub(
        grpc::CreateChannel(g.address(), grpc::InsecureChannelCredentials()));
    v1::AcquireRequest request;
    request.set_name("billing-run");
    request.set_ttl_ms(60000);
    request.set_owner("test");
    v1::AcquireResponse response;
    grpc::ClientContext context;
    grpc::Status s = lease->Acquire(&context, request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_TRUE(response.acquired());
    return response.token();
  }
  static uint64_t StaleDetail(const grpc::Status& s) {
    google::rpc::Status rich;
    v1::StaleToken detail;
    if (!rich.ParseFromString(s.error_details()) || rich.details_size() != 1 ||
        !rich.details(0).UnpackTo(&detail)) {
      return 0;
    }
    return detail.highest_token();
  }
  static std::string Slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
};

TEST_F(PostgresStorageFenceTest, TheAdapterRaisesHandsOutAndReadsFences) {
  ASSERT_TRUE(adapter_->KeepsFences());
  ASSERT_TRUE(adapter_->RaiseFence("d", 5).ok());
  EXPECT_EQ(StoredFence("d"), 5);
  ASSERT_TRUE(adapter_->RaiseFence("d", 5).ok());
  absl::Status stale = adapter_->RaiseFence("d", 4);
  ASSERT_TRUE(GetStaleToken(stale).has_value()) << stale;
  EXPECT_EQ(GetStaleToken(stale)->highest_token, 5u);
  EXPECT_EQ(adapter_->NextFence("d", 1).value(), 6u);
  EXPECT_EQ(adapter_->NextFence("d", 10).value(), 10u);
  EXPECT_EQ(adapter_->NextFence("fresh", 3).value(), 3u);
  EXPECT_THAT(adapter_->RaiseFence("d", uint64_t{1} << 63),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(adapter_->NextFence("d", uint64_t{1} << 63).status(),
              StatusIs(absl::StatusCode::kOutOfRange));
  std::map<std::string, uint64_t> read;
  ASSERT_TRUE(adapter_
                  ->ReadFences([&](absl::string_view domain, uint64_t token) {
                    read[std::string(domain)] = token;
                  })
                  .ok());
  EXPECT_EQ(read["d"], 10u);
  EXPECT_EQ(read["fresh"], 3u);
}

// fence_next() and fences() are the gateway's: a Write's SQL may neither
// raise another domain's fence with them nor list every domain.
TEST_F(PostgresStorageFenceTest, AWritesSqlCannotCallTheFenceFunctions) {
  for (const char* sql : {"SELECT fencegate.fence_next('other', 100)",
                          "SELECT fencegate.fence_seq('other', 100, 1)",
                          "SELECT * FROM fencegate.fences()",
                          "INSERT INTO jobs (id, owner) SELECT 1, domain "
                          "FROM \"fencegate\".\"fences\"()"}) {
    absl::Status s = Apply("d", 1, {Sql(sql)});
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument)) << sql;
    EXPECT_THAT(s.message(), HasSubstr("only the gateway may call")) << sql;
  }
  EXPECT_EQ(StoredFence("other"), 0);
  EXPECT_EQ(StoredFence("d"), 0);
}

TEST_F(PostgresStorageFenceTest, AFenceThroughOneGatewayShutsOutAnother) {
  testing::TempDir dir;
  auto a = StartGateway(dir.path() + "/a");
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = StartGateway(dir.path() + "/b");
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE(Fence(**a, 42).ok());
  EXPECT_EQ(StoredFence("billing-run"), 42);
  // Gateway b never saw the domain; the database refuses token 41.
  grpc::Status stale = Write(**b, 41, "old holder");
  EXPECT_EQ(stale.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << stale.error_message();
  EXPECT_EQ(StaleDetail(stale), 42u);
  EXPECT_EQ(Count(), 0);
  // Gateway b learns the database's token from the refusal (in the
  // domain's lane, after the reply), and then refuses 41 itself.
  EXPECT_TRUE(testing::WaitFor([&] { return GetFence(**b) == 42u; },
                               absl::Seconds(20)));
  v1::FenceState state;
  grpc::Status fenced = Fence(**b, 41, &state);
  EXPECT_EQ(fenced.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(StaleDetail(fenced), 42u);
  EXPECT_EQ(GetFence(**b), 42u);
  ASSERT_TRUE(Write(**b, 42, "new holder").ok());
  EXPECT_EQ(Count("owner = 'new holder'"), 1);
}

// Gateways on one database count each other by their presence connections
// (a fleet serves no LEASE-bound domain: gateway/fleet_watch.h): two routes
// of one gateway (here two adapters of this process) are one gateway; a
// gateway process is another; one of another fence schema is another
// fleet; one that is killed is no longer counted.
TEST_F(PostgresStorageFenceTest, GatewaysOnOneDatabaseCountEachOther) {
  auto a = MakeAdapter("");
  auto a2 = MakeAdapter("");
  auto other_schema = MakeAdapter("fence_schema=elsewhere");
  ASSERT_OK(a->OtherGateways().status());
  EXPECT_EQ(*a->OtherGateways(), 0);
  EXPECT_EQ(*a2->OtherGateways(), 0);
  testing::TempDir dir;
  auto gateway = StartGateway(dir.path() + "/g");
  ASSERT_TRUE(gateway.ok()) << gateway.status();
  // It counted itself present before it served.
  EXPECT_EQ(*a->OtherGateways(), 1);
  EXPECT_EQ(*other_schema->OtherGateways(), 0);
  (*gateway)->Stop(SIGKILL);
  EXPECT_TRUE(testing::WaitFor([&] {
    absl::StatusOr<int> others = a->OtherGateways();
    return others.ok() && *others == 0;
  }));
}

TEST_F(PostgresStorageFenceTest, TwoGatewaysNeverGrantOneToken) {
  testing::TempDir dir;
  auto a = StartGateway(dir.path() + "/a");
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = StartGateway(dir.path() + "/b");
  ASSERT_TRUE(b.ok()) << b.status();
  const uint64_t first = Grant(**a);
  EXPECT_EQ(StoredFence("billing-run"), static_cast<int64_t>(first));
  const uint64_t second = Grant(**b);
  EXPECT_GT(second, first);
  // The first holder is shut out through either gateway.
  EXPECT_EQ(Write(**a, first, "first").error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(Write(**b, first, "first").error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(Write(**a, second, "second").ok());
  EXPECT_EQ(Count(), 1);
}

TEST_F(PostgresStorageFenceTest, ALostOrOlderFenceStoreIsRaisedAtStartUp) {
  testing::TempDir dir;
  const std::string data = dir.path() + "/a";
  auto a = StartGateway(data);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(Fence(**a, 10).ok());
  ASSERT_EQ((*a)->Stop(SIGTERM), 0);
  std::filesystem::copy(data + "/fence", dir.path() + "/old-fence",
                        std::filesystem::copy_options::recursive);
  // Lost: the fence directory is gone.
  std::filesystem::remove_all(data + "/fence");
  a = StartGateway(data);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(GetFence(**a), 10u);
  EXPECT_THAT(Slurp((*a)->log_path()),
              HasSubstr("1 missing from the fence store and 0 lower"));
  EXPECT_EQ(Grant(**a), 11u);
  ASSERT_EQ((*a)->Stop(SIGTERM), 0);
  // Restored from an older copy (token 10; the database holds 11).
  std::filesystem::remove_all(data + "/fence");
  std::filesystem::copy(dir.path() + "/old-fence", data + "/fence",
                        std::filesystem::copy_options::recursive);
  a = StartGateway(data);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(GetFence(**a), 11u);
  EXPECT_THAT(Slurp((*a)->log_path()),
              HasSubstr("0 missing from the fence store and 1 lower"));
  EXPECT_EQ(Write(**a, 10, "old holder").error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(Count(), 0);
}

}  // namespace
}  // namespace fencegate
