// Copyright fencegate authors.
//
// The gateway's metrics and per-route health, against a real gateway
// process and a real PostgreSQL (docs/operations.md, "Metrics" and
// "Health"): /metrics is scraped over HTTP, and each metric moves with the
// traffic that should move it -- ok, stale and invalid writes, a Fence, a
// fence advance, a lease grant and expiry, the PostgreSQL pool. A route's
// health goes NOT_SERVING while its PostgreSQL is stopped and SERVING again
// after it restarts, while the gateway's own status stays SERVING; `fencectl
// health` reports both with its documented exit codes.

#include <map>
#include <memory>
#include <string>
#include <thread>

#include "fencegate/v1/gateway.grpc.pb.h"
#include "fencegate/v1/lease.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "pqxx/pqxx"
#include "tests/metrics_scrape.h"
#include "tests/postgres_server.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

using ::fencegate::testing::FreeLoopbackPort;
using ::fencegate::testing::GatewayProcess;
using ::fencegate::testing::HttpGet;
using ::fencegate::testing::PostgresServer;
using ::fencegate::testing::RunCommand;
using ::fencegate::testing::SampleValue;
using ::fencegate::testing::WaitFor;
using Labels = std::map<std::string, std::string>;

class ObservabilityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(pg, PostgresServer::Start());
    pg_ = std::move(pg);
    pqxx::connection c(pg_->Conninfo());
    pqxx::work tx(c);
    tx.exec("CREATE TABLE events (id bigint)");
    tx.exec("GRANT ALL ON events TO fencegate_worker");
    tx.commit();
    metrics_port_ = FreeLoopbackPort();
    ASSERT_NE(metrics_port_, 0);
    ASSERT_OK_AND_ASSIGN(
        gateway,
        GatewayProcess::Start(
            dir_.path() + "/data",
            {"--route=files=file://" + dir_.path() + "/data/files",
             "--route=db=" + pg_->Uri(),
             absl::StrCat("--metrics_listen=127.0.0.1:", metrics_port_)}));
    gateway_ = std::move(gateway);
    channel_ = grpc::CreateChannel(gateway_->address(),
                                   grpc::InsecureChannelCredentials());
  }

  std::string Scrape() {
    absl::StatusOr<std::string> text = HttpGet(metrics_port_, "/metrics");
    EXPECT_TRUE(text.ok()) << text.status();
    return text.ok() ? *text : "";
  }
  double Value(const std::string& name, const Labels& labels = {}) {
    return SampleValue(Scrape(), name, labels);
  }

  grpc::Status Write(const std::string& domain, uint64_t token,
                     const std::string& resource, const std::string& sql = "",
                     bool no_ops = false, bool if_absent = false) {
    v1::WriteRequest request;
    request.set_domain(domain);
    request.set_token(token);
    request.set_resource(resource);
    if (!no_ops) {
      if (sql.empty()) {
        request.add_ops()->mutable_put()->set_data("x");
      } else {
        request.add_ops()->mutable_sql()->set_sql(sql);
      }
      if (if_absent) request.mutable_ops(0)->set_if_absent(true);
    }
    v1::WriteResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
    return v1::Gateway::NewStub(channel_)->Write(&context, request, &response);
  }
  grpc::Status Fence(const std::string& domain, uint64_t token) {
    v1::FenceRequest request;
    request.set_domain(domain);
    request.set_token(token);
    v1::FenceState state;
    grpc::ClientContext context;
    return v1::Gateway::NewStub(channel_)->Fence(&context, request, &state);
  }
  // `fencectl health`'s exit code.
  int Health(const std::string& route) {
    std::vector<std::string> argv = {FENCECTL_BIN,
                                     "--addr=" + gateway_->address(), "health"};
    if (!route.empty()) argv.push_back("--route=" + route);
    std::string out;
    return RunCommand(argv, &out);
  }

  testing::TempDir dir_;
  std::unique_ptr<PostgresServer> pg_;
  std::unique_ptr<GatewayProcess> gateway_;
  std::shared_ptr<grpc::Channel> channel_;
  int metrics_port_ = 0;
};

TEST_F(ObservabilityTest, WriteAndFenceOutcomesAdvancesAndDomainsAreCounted) {
  const Labels files_ok = {{"route", "files"}, {"outcome", "ok"}};
  const Labels files_stale = {{"route", "files"}, {"outcome", "stale"}};
  const Labels files_invalid = {{"route", "files"}, {"outcome", "invalid"}};
  const Labels none_invalid = {{"route", "none"}, {"outcome", "invalid"}};
  const Labels files_conflict = {{"route", "files"}, {"outcome", "conflict"}};
  EXPECT_EQ(Value("fencegate_writes_total", files_ok), 0);
  EXPECT_EQ(Value("fencegate_domains"), 0);

  ASSERT_TRUE(Write("jobs", 5, "files/a").ok());
  ASSERT_TRUE(Write("jobs", 5, "files/a").ok());  // Equal: no advance.
  EXPECT_EQ(Write("jobs", 4, "files/a").error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(Write("jobs", 6, "files/a", "", /*no_ops=*/true).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Write("jobs", 6, "nowhere/a").error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  // A failed precondition is a conflict, not an error.
  EXPECT_EQ(
      Write("jobs", 5, "files/a", "", false, /*if_absent=*/true).error_code(),
      grpc::StatusCode::FAILED_PRECONDITION);

  const std::string text = Scrape();
  EXPECT_EQ(SampleValue(text, "fencegate_writes_total", files_ok), 2);
  EXPECT_EQ(SampleValue(text, "fencegate_writes_total", files_stale), 1);
  EXPECT_EQ(SampleValue(text, "fencegate_writes_total", files_invalid), 1);
  EXPECT_EQ(SampleValue(text, "fencegate_writes_total", none_invalid), 1);
  EXPECT_EQ(SampleValue(text, "fencegate_writes_total", files_conflict), 1);
  EXPECT_EQ(SampleValue(text, "fencegate_write_duration_seconds_count",
                        {{"route", "files"}}),
            5);
  EXPECT_EQ(SampleValue(text, "fencegate_fence_advances_total"), 1);
  EXPECT_GE(
      SampleValue(text, "fencegate_fence_store_sync_duration_seconds_count"),
      1);
  EXPECT_EQ(SampleValue(text, "fencegate_domains"), 1);
  // Both accepted puts went through the file route's commit thread, one
  // after the other: two groups of one.
  EXPECT_EQ(SampleValue(text, "fencegate_file_commit_group_writes_sum",
                        {{"route", "files"}}),
            2);
  EXPECT_EQ(SampleValue(text, "fencegate_file_commit_group_writes_count",
                        {{"route", "files"}}),
            2);

  ASSERT_TRUE(Fence("other", 3).ok());
  EXPECT_EQ(Fence("other", 2).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  const std::string after = Scrape();
  EXPECT_EQ(SampleValue(after, "fencegate_fences_total", {{"outcome", "ok"}}),
            1);
  EXPECT_EQ(
      SampleValue(after, "fencegate_fences_total", {{"outcome", "stale"}}), 1);
  EXPECT_EQ(SampleValue(after, "fencegate_fence_advances_total"), 2);
  EXPECT_EQ(SampleValue(after, "fencegate_domains"), 2);
}

TEST_F(ObservabilityTest, LeaseGrantsExpiriesAndHeldLeases) {
  auto lease = v1::Lease::NewStub(channel_);
  v1::AcquireRequest request;
  request.set_name("nightly");
  request.set_ttl_ms(300);
  v1::AcquireResponse response;
  grpc::ClientContext context;
  ASSERT_TRUE(lease->Acquire(&context, request, &response).ok());
  ASSERT_TRUE(response.acquired());
  EXPECT_EQ(Value("fencegate_lease_grants_total"), 1);
  // Nobody renews it: it expires. (A scrape may fall between the two
  // updates: the metrics are read without the lease service's lock.)
  EXPECT_TRUE(WaitFor([&] {
    return Value("fencegate_lease_expiries_total") == 1 &&
           Value("fencegate_leases_held") == 0;
  }));
  EXPECT_EQ(Value("fencegate_lease_expiries_total"), 1);
  // The grant raised the fence durably.
  EXPECT_EQ(Value("fencegate_fence_advances_total"), 1);
}

TEST_F(ObservabilityTest, PostgresPoolAndRouteHealthAcrossARestart) {
  ASSERT_TRUE(
      Write("pg", 1, "db/events", "INSERT INTO events VALUES (1)").ok());
  std::string text = Scrape();
  EXPECT_EQ(SampleValue(text, "fencegate_writes_total",
                        {{"route", "db"}, {"outcome", "ok"}}),
            1);
  EXPECT_GE(
      SampleValue(text, "fencegate_postgres_connections", {{"route", "db"}}),
      1);
  EXPECT_GE(SampleValue(text, "fencegate_postgres_queue_wait_seconds_count",
                        {{"route", "db"}}),
            1);
  // While a statement runs its connection is busy; afterwards it is idle.
  std::thread slow([&] {
    EXPECT_TRUE(Write("slow", 1, "db/events", "SELECT pg_sleep(2)").ok());
  });
  const Labels db_busy = {{"route", "db"}, {"state", "busy"}};
  const Labels db_idle = {{"route", "db"}, {"state", "idle"}};
  EXPECT_TRUE(WaitFor(
      [&] { return Value("fencegate_postgres_connections", db_busy) >= 1; }));
  slow.join();
  EXPECT_TRUE(WaitFor(
      [&] { return Value("fencegate_postgres_connections", db_busy) == 0; }));
  EXPECT_GE(Value("fencegate_postgres_connections", db_idle), 1);

  EXPECT_EQ(Health("db"), 0);
  EXPECT_EQ(Health(""), 0);
  EXPECT_EQ(Health("no-such-route"), 4);

  ASSERT_OK(pg_->Stop());
  EXPECT_TRUE(WaitFor([&] { return Health("db") == 9; }));
  EXPECT_EQ(Health("files"), 0);  // Other routes are unaffected,
  EXPECT_EQ(Health(""), 0);       // and so is the gateway's own status.
  EXPECT_NE(
      Write("pg", 1, "db/events", "INSERT INTO events VALUES (2)").error_code(),
      grpc::StatusCode::OK);
  EXPECT_GE(Value("fencegate_writes_total",
                  {{"route", "db"}, {"outcome", "unavailable"}}),
            1);

  ASSERT_OK(pg_->Restart());
  EXPECT_TRUE(WaitFor([&] { return Health("db") == 0; }));
  EXPECT_TRUE(WaitFor([&] {
    return Write("pg", 1, "db/events", "INSERT INTO events VALUES (3)").ok();
  }));
}

}  // namespace
}  // namespace fencegate
