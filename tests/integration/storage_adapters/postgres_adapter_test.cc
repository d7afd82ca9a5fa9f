// Copyright fencegate authors.
//
// The PostgreSQL adapter against a real PostgreSQL server started by the
// test itself; through the adapter, and end to end through gateway
// processes.

#include "storage_adapters/postgres/postgres_adapter.h"

#include <signal.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fencegate/common/stale_token.h"
#include "fencegate/common/uri.h"
#include "fencegate/v1/errors.pb.h"
#include "fencegate/v1/gateway.grpc.pb.h"
#include "google/rpc/status.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "postgres/fence_schema.h"
#include "postgres/route_options.h"
#include "pqxx/pqxx"
#include "storage_adapters/postgres/config.h"
#include "tests/postgres_adapter_fixture.h"

namespace fencegate {
namespace {

using ::fencegate::testing::GatewayProcess;
using ::fencegate::testing::StatusIs;
using ::testing::HasSubstr;

TEST_F(PostgresAdapterTest, AcceptedWriteLandsWithRowCountsAndReturning) {
  OpResults results;
  ASSERT_OK(Apply("billing", 3,
                  {Sql("INSERT INTO jobs (id, owner) VALUES ($1, $2)",
                       {Int(1), Text("w1")}),
                   Sql("INSERT INTO jobs (id, owner) VALUES ($1, $2), ($3, $2) "
                       "RETURNING id, owner",
                       {Int(2), Text("w1"), Int(3)})},
                  &results));
  ASSERT_EQ(results.size(), 2);
  EXPECT_EQ(results[0].sql().rows_affected(), 1u);
  EXPECT_EQ(results[1].sql().rows_affected(), 2u);
  ASSERT_EQ(results[1].sql().rows_size(), 2);
  EXPECT_EQ(results[1].sql().columns(0), "id");
  EXPECT_EQ(results[1].sql().rows(1).fields(0).text(), "3");
  EXPECT_EQ(Count("owner = 'w1'"), 3);
  EXPECT_EQ(StoredFence("billing"), 3);
}

TEST_F(PostgresAdapterTest, StaleWriteLeavesTableUntouched) {
  ASSERT_OK(Apply("billing", 10,
                  {Sql("INSERT INTO jobs (id, owner) VALUES (1, 'new')")}));
  absl::Status stale =
      Apply("billing", 9, {Sql("UPDATE jobs SET owner = 'late' WHERE id = 1")});
  EXPECT_THAT(stale, StatusIs(absl::StatusCode::kFailedPrecondition));
  std::optional<StaleTokenInfo> info = GetStaleToken(stale);
  ASSERT_TRUE(info.has_value()) << stale;
  EXPECT_EQ(info->highest_token, 10u);
  EXPECT_EQ(Count("owner = 'new'"), 1);
  EXPECT_EQ(StoredFence("billing"), 10);
  // Equal tokens are accepted.
  ASSERT_OK(Apply("billing", 10,
                  {Sql("UPDATE jobs SET owner = 'same' WHERE id = 1")}));
  EXPECT_EQ(Count("owner = 'same'"), 1);
}

TEST_F(PostgresAdapterTest, DirectWriterFollowingTheProtocolFencesTheGateway) {
  // A writer outside fencegate calls the fence function first in its own
  // transaction (docs/postgres.md).
  Exec("SELECT fencegate.fence('billing', 50)");
  absl::Status stale =
      Apply("billing", 49, {Sql("INSERT INTO jobs (id) VALUES (1)")});
  EXPECT_THAT(stale, StatusIs(absl::StatusCode::kFailedPrecondition));
  std::optional<StaleTokenInfo> info = GetStaleToken(stale);
  ASSERT_TRUE(info.has_value()) << stale;
  EXPECT_EQ(info->highest_token, 50u);
  EXPECT_EQ(Count(), 0);
  EXPECT_EQ(StoredFence("billing"), 50);
  // And the gateway's token fences the direct writer: its call fails.
  ASSERT_OK(Apply("billing", 51, {Sql("INSERT INTO jobs (id) VALUES (2)")}));
  EXPECT_THROW(Exec("SELECT fencegate.fence('billing', 50)"), pqxx::sql_error);
  EXPECT_EQ(StoredFence("billing"), 51);
}

// Each Write is one transaction; statements that would end or split it are
// refused before anything is sent.
TEST_F(PostgresAdapterTest, TransactionControlIsRefused) {
  ASSERT_OK(Apply("d", 1, {Sql("INSERT INTO jobs (id) VALUES (1)")}));
  for (const char* sql :
       {"COMMIT", "  begin", "/* a /* nested */ comment */ Rollback",
        "-- note\nEND", "SAVEPOINT s", "RELEASE SAVEPOINT s", "ABORT",
        "start transaction", "PREPARE TRANSACTION 'x'"}) {
    absl::Status s =
        Apply("d", 2, {Sql("INSERT INTO jobs (id) VALUES (2)"), Sql(sql)});
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument)) << sql;
    EXPECT_THAT(s.message(), HasSubstr("transaction control")) << sql;
  }
  // COPY's data phase has no place in a Write.
  absl::Status copy = Apply("d", 2, {Sql("copy jobs to stdout")});
  EXPECT_THAT(copy, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(copy.message(), HasSubstr("COPY"));
  EXPECT_EQ(Count(), 1);
  EXPECT_EQ(StoredFence("d"), 1);
  // A statement that is only a comment holds no statement: refused.
  absl::Status empty =
      Apply("d", 2,
            {Sql("-- nothing to do"), Sql("INSERT INTO jobs (id) VALUES (3)")});
  EXPECT_THAT(empty, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(empty.message(), HasSubstr("ops[0].sql: holds no statement"));
  OpResults results;
  ASSERT_OK(Apply("d", 2, {Sql("INSERT INTO jobs (id) VALUES (3)")}, &results));
  ASSERT_EQ(results.size(), 1);
  EXPECT_EQ(results[0].sql().rows_affected(), 1u);
  EXPECT_EQ(Count(), 2);
  // Words that only start like one are fine.
  ASSERT_OK(Apply(
      "d", 2, {Sql("UPDATE jobs SET owner = 'ending' WHERE id = 1 -- END")}));
  EXPECT_EQ(Count("owner = 'ending'"), 1);
  EXPECT_EQ(StoredFence("d"), 2);
}

// PostgreSQL closes a pooled connection while it sits idle (an
// administrator, idle_session_timeout, a proxy): the next write notices
// before sending and uses a new connection instead of failing.
TEST_F(PostgresAdapterTest, ConnectionClosedWhileIdleIsReplaced) {
  ASSERT_OK(Apply("d", 1, {Sql("INSERT INTO jobs (id) VALUES (1)")}));
  ASSERT_GE(TerminateClientBackends(), 1);
  ASSERT_OK(Apply("d", 1, {Sql("INSERT INTO jobs (id) VALUES (2)")}));
  EXPECT_EQ(Count(), 2);
}

TEST_F(PostgresAdapterTest, EveryStatementRollsBackWhenOneFails) {
  ASSERT_OK(Apply("d", 1, {Sql("INSERT INTO jobs (id) VALUES (1)")}));
  absl::Status failed =
      Apply("d", 2,
            {Sql("INSERT INTO jobs (id, owner) VALUES (2, 'x')"),
             Sql("UPDATE jobs SET owner = 'y' WHERE id = 1"),
             Sql("INSERT INTO jobs (id) VALUES (1)")});  // Duplicate key.
  EXPECT_THAT(failed, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(failed.message(), HasSubstr("23505"));
  EXPECT_THAT(failed.message(), HasSubstr("ops[2]"));
  EXPECT_FALSE(GetStaleToken(failed).has_value());
  EXPECT_EQ(Count(), 1);
  EXPECT_EQ(Count("owner IS NULL"), 1);
  EXPECT_EQ(StoredFence("d"), 1);  // The fence row rolled back too.

  absl::Status syntax =
      Apply("d", 2, {Sql("INSERT INTO nosuchtable VALUES (1)")});
  EXPECT_THAT(syntax, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(syntax.message(), HasSubstr("42P01"));
}

TEST_F(PostgresAdapterTest, ParametersStayData) {
  const std::string evil = "x'); DROP TABLE jobs; --";
  ASSERT_OK(Apply("d", 1,
                  {Sql("INSERT INTO jobs (id, owner) VALUES ($1, $2)",
                       {Int(1), Text(evil)})}));
  pqxx::result r = Exec("SELECT owner FROM jobs WHERE id = 1");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0][0].as<std::string>(), evil);
  // A second statement smuggled into the SQL text itself is refused.
  absl::Status multi = Apply(
      "d", 1, {Sql("INSERT INTO jobs (id) VALUES (2); DELETE FROM jobs")});
  EXPECT_THAT(multi, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(Count(), 1);
}

TEST_F(PostgresAdapterTest, TypedParametersRoundTrip) {
  v1::SqlValue dbl, yes, bytes, null;
  dbl.set_float64(2.5);
  yes.set_boolean(true);
  bytes.set_bytes(std::string("\0\x01\xff", 3));
  null.set_null(true);
  OpResults results;
  ASSERT_OK(Apply("d", 1,
                  {Sql("INSERT INTO jobs (id, owner, amount, done, payload) "
                       "VALUES ($1, $2, $3, $4, $5) RETURNING *",
                       {Int(-9223372036854775807LL), null, dbl, yes, bytes})},
                  &results));
  const v1::SqlRow& row = results[0].sql().rows(0);
  EXPECT_EQ(row.fields(0).text(), "-9223372036854775807");
  EXPECT_TRUE(row.fields(1).null());
  EXPECT_EQ(row.fields(2).text(), "2.5");
  EXPECT_EQ(row.fields(3).text(), "t");
  EXPECT_EQ(row.fields(4).text(), "\\x0001ff");
  EXPECT_EQ(Count("payload = '\\x0001ff'::bytea AND done AND owner IS NULL"),
            1);
}

// A Write is sent as one pipeline: megabytes of statements going out while
// megabytes of results come back must not leave both sides blocked on a
// full socket.
TEST_F(PostgresAdapterTest, LargeWriteWithLargeResultsCompletes) {
  const std::string big(100 * 1024, 'x');
  std::vector<v1::Operation> ops;
  for (int i = 0; i < 40; ++i) {
    ops.push_back(Sql("SELECT $1::text || $2::text", {Text(big), Int(i)}));
  }
  ops.push_back(Sql("INSERT INTO jobs (id) VALUES (1)"));
  OpResults results;
  ASSERT_OK(Apply("d", 1, ops, &results));
  ASSERT_EQ(results.size(), 41);
  EXPECT_EQ(results[39].sql().rows(0).fields(0).text(), big + "39");
  EXPECT_EQ(Count(), 1);
}

TEST_F(PostgresAdapterTest, ReturnedRowsAreCapped) {
  auto capped = MakeAdapter("max_result_rows=2");
  OpResults results;
  ASSERT_OK(Apply(capped.get(), "d", 1,
                  {Sql("INSERT INTO jobs (id) SELECT g FROM "
                       "generate_series(1, 5) g RETURNING id")},
                  &results));
  EXPECT_EQ(results[0].sql().rows_affected(), 5u);
  EXPECT_EQ(results[0].sql().rows_size(), 2);
  EXPECT_TRUE(results[0].sql().truncated());
  EXPECT_EQ(Count(), 5);
}

// The SQL text a Write carries is bounded in all (max_sql_bytes), before
// any of it is parsed.
TEST_F(PostgresAdapterTest, SqlTextIsBoundedPerWrite) {
  auto capped = MakeAdapter("max_sql_bytes=64");
  auto insert = [](int id) {  // 32 bytes of SQL
    return Sql(absl::StrCat("INSERT INTO jobs (id) VALUES (", id, ")"));
  };
  ASSERT_OK(Apply(capped.get(), "d", 1, {insert(1), insert(2)}));
  absl::Status refused =
      Apply(capped.get(), "d", 1, {insert(3), insert(4), insert(5)});
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(refused.message(),
              HasSubstr("96 bytes of SQL text in all exceed the route's "
                        "max_sql_bytes (64)"));
  EXPECT_EQ(Count(), 2);
}

// A row of more than 4 MiB grows libpq's input buffer for good: its
// connection is closed after the Write instead of pooled, giving the
// memory back; a smaller row keeps it.
TEST_F(PostgresAdapterTest, AConnectionThatReadAHugeRowIsNotKept) {
  auto one = MakeAdapter("pool_size=1&max_result_bytes=16777216");
  auto backend = [&]() -> std::string {
    OpResults results;
    EXPECT_OK(
        Apply(one.get(), "d", 1, {Sql("SELECT pg_backend_pid()")}, &results));
    return results.size() == 1 && results[0].sql().rows_size() == 1
               ? results[0].sql().rows(0).fields(0).text()
               : "";
  };
  auto row_of = [&](int bytes) {
    OpResults results;
    EXPECT_OK(Apply(one.get(), "d", 1,
                    {Sql(absl::StrCat("SELECT repeat('x', ", bytes, ")"))},
                    &results));
    return results.size() == 1 && results[0].sql().rows_size() == 1
               ? results[0].sql().rows(0).fields(0).text().size()
               : 0;
  };
  const std::string first = backend();
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(row_of(3 << 20), size_t{3} << 20);
  EXPECT_EQ(backend(), first);
  EXPECT_EQ(row_of(5 << 20), size_t{5} << 20);
  const std::string after = backend();
  EXPECT_FALSE(after.empty());
  EXPECT_NE(after, first);
}

TEST_F(PostgresAdapterTest, TokensBeyondBigintAreRefusedBeforeAnything) {
  EXPECT_OK(Apply("d", 9223372036854775807ULL,
                  {Sql("INSERT INTO jobs (id) VALUES (1)")}));
  absl::Status too_big = Apply("e", 9223372036854775808ULL,
                               {Sql("INSERT INTO jobs (id) VALUES (2)")});
  EXPECT_THAT(too_big, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(too_big.message(), HasSubstr("bigint"));
  EXPECT_EQ(Count(), 1);
}

TEST_F(PostgresAdapterTest, ValidateRefusesMalformedOperations) {
  v1::Operation file_op;
  file_op.mutable_put()->set_data("x");
  EXPECT_THAT(Apply("d", 1, {file_op}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Apply("d", 1, {Sql("")}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Apply("d", 1, {Sql("SELECT $1", {v1::SqlValue()})}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // As many parameters as the statement takes, or nothing is sent (the
  // server would refuse the bind with a protocol error).
  for (const auto& [sql, given] : std::vector<std::pair<std::string, int>>{
           {"UPDATE jobs SET owner = $1 WHERE id = $2", 1},
           {"UPDATE jobs SET owner = 'x' WHERE id = $1", 2},
           {"UPDATE jobs SET owner = 'x'", 1}}) {
    std::vector<v1::Operation> ops = {Sql(sql)};
    for (int p = 0; p < given; ++p)
      *ops[0].mutable_sql()->add_params() = Int(p);
    absl::Status s = Apply("d", 1, ops);
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument)) << sql;
    EXPECT_THAT(s.message(), HasSubstr("ops[0].params: the statement takes"))
        << sql;
  }
  EXPECT_EQ(StoredFence("d"), 0);
}

TEST_F(PostgresAdapterTest, StatementTimeoutIsDeadlineExceeded) {
  auto quick = MakeAdapter("statement_timeout_ms=100");
  EXPECT_THAT(Apply(quick.get(), "d", 1, {Sql("SELECT pg_sleep(30)")}),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
}

TEST_F(PostgresAdapterTest, CustomFenceSchemaAndBadUris) {
  ASSERT_OK(postgres::SetUpFenceSchema(server_->Conninfo(), "other_fences",
                                       testing::PostgresServer::kWorkerRole));
  auto custom = MakeAdapter("fence_schema=other_fences");
  ASSERT_OK(
      Apply(custom.get(), "d", 4, {Sql("INSERT INTO jobs (id) VALUES (1)")}));
  EXPECT_EQ(
      Exec("SELECT token FROM other_fences.fences WHERE domain = 'd'")[0][0]
          .as<int64_t>(),
      4);
  EXPECT_EQ(StoredFence("d"), 0);
  AdapterRegistry registry;
  ASSERT_OK(RegisterBuiltinAdapters(&registry));
  for (const char* bad : {"postgres:///db", "postgres://u@h/db?pool_size=0",
                          "postgres://u@h/db?fence_schema=Robert');--",
                          "postgres://u@h/db?fence_table=old_fences",
                          "postgres://u@h/db?allow_privileged_role=yes",
                          "postgres://u@h/db?options=-c%20role%3Dx",
                          "postgres://u@h/db?statement_timeout_ms=abc",
                          "postgres://u@h/db?spread_after_ms=-1",
                          "postgres://u@h/db?client_encoding=SJIS",
                          "postgres://u@h/db?allow_dirty_statements=1",
                          "postgres://u@h/db?search_path=pg_temp",
                          "postgres://u@h/db?search_path=a;b"}) {
    EXPECT_THAT(registry.Create(bad),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << bad;
  }
  // Passwords never appear in errors.
  absl::StatusOr<std::unique_ptr<StorageAdapter>> secret =
      registry.Create("postgres://u:hunter2@h/db?pool_size=0");
  EXPECT_THAT(secret.status().message(), ::testing::Not(HasSubstr("hunter2")));
}

// A server or network gone silent must not hold a connection (and the
// writes on it) for ever: TCP keepalives and a user timeout are on unless
// the URI says otherwise, and what the URI says wins. (Every other test
// here connects with these defaults, so libpq accepts them.)
TEST(PostgresUriTest, KeepalivesAreOnUnlessTheUriSetsThem) {
  ASSERT_OK_AND_ASSIGN(plain, ParseUri("postgres://u@h/db?pool_size=2"));
  ASSERT_OK_AND_ASSIGN(defaults, postgres::ParseRouteUri(plain));
  for (const char* param : {"connect_timeout=5", "keepalives=1",
                            "keepalives_idle=30", "keepalives_interval=10",
                            "keepalives_count=3", "tcp_user_timeout=60000"}) {
    EXPECT_THAT(defaults.conninfo, HasSubstr(param));
  }
  EXPECT_THAT(defaults.conninfo, ::testing::Not(HasSubstr("pool_size")));
  ASSERT_OK_AND_ASSIGN(
      tuned,
      ParseUri("postgres://u@h/db?keepalives_idle=5&tcp_user_timeout=0"));
  ASSERT_OK_AND_ASSIGN(options, postgres::ParseRouteUri(tuned));
  EXPECT_THAT(options.conninfo, HasSubstr("keepalives_idle=5"));
  EXPECT_THAT(options.conninfo,
              ::testing::Not(HasSubstr("keepalives_idle=30")));
  EXPECT_THAT(options.conninfo, HasSubstr("tcp_user_timeout=0"));
  EXPECT_THAT(options.conninfo, ::testing::Not(HasSubstr("60000")));
  EXPECT_THAT(options.conninfo, HasSubstr("keepalives_count=3"));
}

// The PostgreSQL port's read role (docs/pgwire.md): a plain role name,
// its password never quoted, and no password without a role.
TEST(PostgresUriTest, TheReadRoleAndItsPasswordStayOutOfMessages) {
  ASSERT_OK_AND_ASSIGN(uri,
                       ParseUri("postgres://u:hunter2@h/db?read_user=reader&"
                                "read_password=swordfish&password=tiger"));
  EXPECT_EQ(uri.redacted,
            "postgres://u:***@h/db?read_user=reader&read_password=***&"
            "password=***");
  ASSERT_OK_AND_ASSIGN(options, postgres::ParseRouteUri(uri));
  EXPECT_EQ(options.read_user, "reader");
  EXPECT_EQ(options.read_password, "swordfish");
  EXPECT_THAT(options.conninfo, ::testing::Not(HasSubstr("swordfish")));
  EXPECT_THAT(options.conninfo, ::testing::Not(HasSubstr("read_user")));
  for (const char* bad : {"postgres://u@h/db?read_user=Reader%20x",
                          "postgres://u@h/db?read_password=swordfish"}) {
    ASSERT_OK_AND_ASSIGN(parsed, ParseUri(bad));
    absl::StatusOr<postgres::RouteOptions> refused =
        postgres::ParseRouteUri(parsed);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
    EXPECT_THAT(refused.status().message(),
                ::testing::Not(HasSubstr("swordfish")));
  }
}

// PostgreSQL restarts under a running adapter: UNAVAILABLE while it is down,
// and the next write after it is back succeeds without a new adapter.
TEST_F(PostgresAdapterTest, RecoversAfterServerRestart) {
  ASSERT_OK(Apply("d", 1, {Sql("INSERT INTO jobs (id) VALUES (1)")}));
  ASSERT_OK(server_->Stop());
  absl::Status down = Apply("d", 2, {Sql("INSERT INTO jobs (id) VALUES (2)")});
  EXPECT_THAT(down, StatusIs(absl::StatusCode::kUnavailable));
  ASSERT_OK(server_->Restart());
  ASSERT_OK(Apply("d", 2, {Sql("INSERT INTO jobs (id) VALUES (2)")}));
  EXPECT_EQ(Count(), 2);
}

// Starts a gateway process whose route "db" is `uri`, and a stub for it.
void StartGateway(const std::string& data_dir, const std::string& uri,
                  std::unique_ptr<GatewayProcess>* process,
                  std::unique_ptr<v1::Gateway::Stub>* stub) {
  auto started = GatewayProcess::Start(data_dir, {"--route=db=" + uri});
  ASSERT_TRUE(started.ok()) << started.status();
  *process = *std::move(started);
  *stub = v1::Gateway::NewStub(grpc::CreateChannel(
      (*process)->address(), grpc::InsecureChannelCredentials()));
}

// The same through a gateway process: UNAVAILABLE while PostgreSQL is
// down, and the gateway recovers on its own once it is back.
TEST_F(PostgresAdapterTest, GatewayRecoversAfterServerRestart) {
  testing::TempDir dir;
  std::unique_ptr<GatewayProcess> gateway;
  std::unique_ptr<v1::Gateway::Stub> stub;
  ASSERT_NO_FATAL_FAILURE(
      StartGateway(dir.path() + "/g", server_->Uri(), &gateway, &stub));
  auto write = [&](int64_t id) {
    v1::WriteRequest request;
    request.set_domain("d");
    request.set_token(1);
    request.set_resource("db/jobs");
    *request.add_ops() = Sql("INSERT INTO jobs (id) VALUES ($1)", {Int(id)});
    v1::WriteResponse response;
    grpc::ClientContext context;
    return stub->Write(&context, request, &response);
  };
  ASSERT_TRUE(write(1).ok());
  ASSERT_OK(server_->Stop());
  grpc::Status down = write(2);
  EXPECT_EQ(down.error_code(), grpc::StatusCode::UNAVAILABLE)
      << down.error_message();
  ASSERT_OK(server_->Restart());
  grpc::Status back = write(2);
  EXPECT_TRUE(back.ok()) << back.error_message();
  EXPECT_EQ(Count(), 2);
}

// Through a gateway, on both of its paths: advances go through the I/O pool
// (a synced fence write), while equal and stale tokens of a fence held in
// memory are decided on gRPC's thread and queued to the adapter there.
// Every fencing rule holds on each.
TEST_F(PostgresAdapterTest, GatewayKeepsTheRulesOnEveryPath) {
  testing::TempDir dir;
  std::unique_ptr<GatewayProcess> gateway;
  std::unique_ptr<v1::Gateway::Stub> stub;
  ASSERT_NO_FATAL_FAILURE(
      StartGateway(dir.path() + "/g", server_->Uri(), &gateway, &stub));
  auto write = [&](uint64_t token, int64_t id, v1::WriteResponse* response) {
    v1::WriteRequest request;
    request.set_domain("d");
    request.set_token(token);
    request.set_resource("db/jobs");
    *request.add_ops() = Sql("INSERT INTO jobs (id) VALUES ($1)", {Int(id)});
    grpc::ClientContext context;
    return stub->Write(&context, request, response);
  };
  auto highest_in_detail = [](const grpc::Status& s) -> int64_t {
    google::rpc::Status rich;
    v1::StaleToken detail;
    if (!rich.ParseFromString(s.error_details()) || rich.details_size() != 1 ||
        !rich.details(0).UnpackTo(&detail)) {
      return -1;
    }
    return static_cast<int64_t>(detail.highest_token());
  };
  v1::WriteResponse r;
  ASSERT_TRUE(write(5, 1, &r).ok());  // Advance.
  EXPECT_TRUE(r.fence_advanced());
  for (int64_t id = 2; id <= 4; ++id) {  // Equal.
    v1::WriteResponse equal;
    grpc::Status s = write(5, id, &equal);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_FALSE(equal.fence_advanced());
    EXPECT_EQ(equal.fence().highest_token(), 5u);
    ASSERT_EQ(equal.results_size(), 1);
    EXPECT_EQ(equal.results(0).sql().rows_affected(), 1u);
  }
  grpc::Status stale = write(4, 10, &r);
  EXPECT_EQ(stale.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(highest_in_detail(stale), 5);
  ASSERT_TRUE(write(6, 5, &r).ok());  // Advance again.
  stale = write(5, 11, &r);
  EXPECT_EQ(stale.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(highest_in_detail(stale), 6);
  EXPECT_EQ(Count(), 5);
  EXPECT_EQ(Count("id >= 10"), 0);
  EXPECT_EQ(StoredFence("d"), 6);
}

// Two gateways, each with its own fence store, in front of one database:
// the database's fence table refuses the stale write that the second
// gateway's own store would have let through.
TEST_F(PostgresAdapterTest, TwoGatewaysOneDatabase) {
  testing::TempDir dir;
  const std::string route = "--route=db=" + server_->Uri();
  auto a = GatewayProcess::Start(dir.path() + "/a", {route});
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = GatewayProcess::Start(dir.path() + "/b", {route});
  ASSERT_TRUE(b.ok()) << b.status();
  auto write = [](GatewayProcess& g, uint64_t token, const std::string& owner) {
    auto stub = v1::Gateway::NewStub(
        grpc::CreateChannel(g.address(), grpc::InsecureChannelCredentials()));
    v1::WriteRequest request;
    request.set_domain("billing-run");
    request.set_token(token);
    request.set_resource("db/jobs");
    *request.add_ops() =
        Sql("INSERT INTO jobs (id, owner) VALUES ($1, $2) "
            "ON CONFLICT (id) DO UPDATE SET owner = EXCLUDED.owner",
            {Int(1), Text(owner)});
    v1::WriteResponse response;
    grpc::ClientContext context;
    return stub->Write(&context, request, &response);
  };
  ASSERT_TRUE(write(**a, 7, "holder-7").ok());
  // Gateway b has never seen the domain; its own store would accept 6.
  grpc::Status stale = write(**b, 6, "holder-6");
  EXPECT_EQ(stale.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << stale.error_message();
  google::rpc::Status rich;
  ASSERT_TRUE(rich.ParseFromString(stale.error_details()));
  v1::StaleToken detail;
  ASSERT_EQ(rich.details_size(), 1);
  ASSERT_TRUE(rich.details(0).UnpackTo(&detail));
  EXPECT_EQ(detail.highest_token(), 7u);
  EXPECT_EQ(Count("owner = 'holder-7'"), 1);
  // And the other way round, after b's holder moves on.
  ASSERT_TRUE(write(**b, 8, "holder-8").ok());
  EXPECT_EQ(write(**a, 7, "holder-7 again").error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(Count("owner = 'holder-8'"), 1);
}

// The worked example of docs/postgres.md, with fencectl.
TEST_F(PostgresAdapterTest, FencectlRunsSqlWithParameters) {
  testing::TempDir dir;
  auto gateway = GatewayProcess::Start(dir.path() + "/g",
                                       {"--route=db=" + server_->Uri()});
  ASSERT_TRUE(gateway.ok()) << gateway.status();
  const std::string addr = "--addr=" + (*gateway)->address();
  auto run = [&](uint64_t token, const std::string& sql,
                 std::vector<std::string> params, std::string* out) {
    std::vector<std::string> argv = {FENCECTL_BIN,
                                     addr,
                                     "write",
                                     "--domain=nightly-billing",
                                     "--token=" + std::to_string(token),
                                     "--resource=db/jobs",
                                     "--sql=" + sql};
    for (const std::string& p : params) argv.push_back("--param=" + p);
    return testing::RunCommand(argv, out);
  };
  std::string out;
  EXPECT_EQ(
      run(5,
          "INSERT INTO jobs (id, owner, amount, done) "
          "VALUES ($1, $2, $3, $4) RETURNING id, owner",
          {"int64:1", "text:worker-a", "float64:12.5", "bool:false"}, &out),
      0);
  EXPECT_THAT(out, HasSubstr("rows_affected=1"));
  EXPECT_THAT(out, HasSubstr("1\tworker-a"));
  EXPECT_EQ(
      run(4, "UPDATE jobs SET done = true WHERE id = $1", {"int64:1"}, &out),
      3);
  EXPECT_EQ(run(5, "INSERT INTO jobs (id) VALUES ($1)", {"int64:1"}, &out), 4);
  EXPECT_EQ(run(5, "SELECT 1", {"int128:1"}, &out), 2);
  EXPECT_EQ(Count("done = false AND owner = 'worker-a'"), 1);
}

}  // namespace
}  // namespace fencegate
