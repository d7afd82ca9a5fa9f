// Copyright fencegate authors.
//
// The PostgreSQL adapter against a careless or hostile caller, on a real
// PostgreSQL server: no statement ends or splits a Write's transaction, the
// fence in the database is out of the route role's reach, NUL bytes never
// cut a statement, and privileged roles are refused. (What one Write could
// leave in its pooled session: postgres_session_test.cc.)

#include <signal.h>
#include <sys/wait.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "fencegate/common/stale_token.h"
#include "fencegate/v1/gateway.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "postgres/fence_schema.h"
#include "storage_adapters/postgres/postgres_adapter.h"
#include "tests/postgres_adapter_fixture.h"

namespace fencegate {
namespace {

using ::fencegate::testing::StatusIs;
using ::testing::HasSubstr;

class PostgresIsolationTest : public PostgresAdapterTest {
 protected:
  // One Write's returned rows, each row's fields joined by '|'.
  static std::string Rows(const OpResults& results, int op) {
    std::string out;
    for (const v1::SqlRow& row : results[op].sql().rows()) {
      if (!out.empty()) out += ";";
      for (int f = 0; f < row.fields_size(); ++f) {
        if (f > 0) out += "|";
        out += row.fields(f).null() ? "NULL" : row.fields(f).text();
      }
    }
    return out;
  }
};

// The fence in the database can only be raised, through its function: the
// route role can neither write, drop nor read the table, and no
// search_path redirects the call.
TEST_F(PostgresIsolationTest, TheDatabaseFenceIsOutOfTheRouteRolesReach) {
  ASSERT_OK(Apply("billing", 10, {Sql("INSERT INTO jobs (id) VALUES (1)")}));
  auto dirty = MakeAdapter("allow_dirty_statements=true");
  // What the classifier lets through, PostgreSQL refuses.
  for (const char* sql :
       {"UPDATE fencegate.fences SET token = 1", "DELETE FROM fencegate.fences",
        "SELECT token FROM fencegate.fences",
        "DO $$BEGIN EXECUTE 'UPDATE fencegate.fences SET token = 1'; END$$"}) {
    absl::Status s = Apply(dirty.get(), "billing", 10, {Sql(sql)});
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument)) << sql;
    EXPECT_THAT(s.message(), HasSubstr("42501")) << sql;  // Insufficient
                                                          // privilege.
  }
  // What it refuses, PostgreSQL would refuse the route role too: the
  // database does not rely on the classifier.
  pqxx::connection as_role(
      absl::StrCat("postgresql://fencegate_worker@127.0.0.1:", server_->port(),
                   "/postgres"));
  for (const char* sql :
       {"TRUNCATE fencegate.fences", "DROP TABLE fencegate.fences",
        "ALTER TABLE fencegate.fences DISABLE TRIGGER ALL",
        // NOLINTNEXTLINE(bugprone-suspicious-missing-comma): one statement.
        "CREATE OR REPLACE FUNCTION fencegate.fence(text, bigint) RETURNS "
        "bigint LANGUAGE sql AS 'SELECT 1::bigint'"}) {
    absl::Status s = Apply("billing", 10, {Sql(sql)});
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument)) << sql;
    EXPECT_THAT(s.message(), HasSubstr("is not allowed")) << sql;
    try {
      pqxx::nontransaction tx(as_role);
      tx.exec(sql);
      ADD_FAILURE() << sql << ": the route role could run it";
    } catch (const pqxx::sql_error& e) {
      // libpqxx 6 leaves sqlstate() empty outside a transaction.
      EXPECT_THAT(e.what(), ::testing::AnyOf(HasSubstr("permission denied"),
                                             HasSubstr("must be owner")))
          << sql;
    }
  }
  EXPECT_EQ(StoredFence("billing"), 10);
  // The fence function, which the route role may call, only as the first
  // write of a transaction: SQL in a Write cannot push another domain's
  // fence out of reach with it.
  absl::Status again =
      Apply("billing", 10,
            {Sql("SELECT fencegate.fence('victim', 9223372036854775807)")});
  EXPECT_THAT(again, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(again.message(), HasSubstr("FG002"));
  absl::Status in_do =
      Apply(dirty.get(), "billing", 10,
            {Sql("DO $$BEGIN PERFORM fencegate.fence('victim', "
                 "9223372036854775807); END$$")});
  EXPECT_THAT(in_do, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(in_do.message(), HasSubstr("FG002"));
  // Nor with hold(), the PostgreSQL port's hold, which raises a lower row:
  // it too runs only as its transaction's first write, so a Write's SQL
  // can neither raise a domain nor arm the route's connection with it (the
  // classifier does not know the names; the database refuses).
  for (StorageAdapter* adapter :
       std::vector<StorageAdapter*>{adapter_.get(), dirty.get()}) {
    absl::Status hold =
        Apply(adapter, "billing", 10,
              {Sql("SELECT fencegate.hold('victim', 9223372036854775807, "
                   "'a-secret-of-the-callers-own')")});
    EXPECT_THAT(hold, StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(hold.message(), HasSubstr("FG002"));
  }
  absl::Status hold_in_do = Apply(
      dirty.get(), "billing", 10,
      {Sql("DO $$BEGIN PERFORM fencegate.hold('victim', "
           "9223372036854775807, 'a-secret-of-the-callers-own'); END$$")});
  EXPECT_THAT(hold_in_do.message(), HasSubstr("FG002"));
  EXPECT_EQ(StoredFence("victim"), 0);
  // The route's connections are not armed by the attempts: the Writes
  // after them still pass their fence().
  ASSERT_OK(Apply("billing", 10, {Sql("SELECT 1")}));
  ASSERT_OK(Apply(dirty.get(), "billing", 10, {Sql("SELECT 1")}));
  // A search_path that puts other objects first -- here the route's own
  // setting -- changes nothing: every name fencegate sends is
  // schema-qualified.
  Exec("DROP SCHEMA IF EXISTS shadow CASCADE");
  Exec("CREATE SCHEMA shadow");
  Exec("GRANT USAGE ON SCHEMA shadow TO fencegate_worker");
  Exec(
      "CREATE FUNCTION shadow.fence(text, bigint) RETURNS bigint LANGUAGE "
      "sql AS 'SELECT 1::bigint'");
  auto shadowed = MakeAdapter("pool_size=1&search_path=shadow,public");
  OpResults path;
  ASSERT_OK(Apply(shadowed.get(), "billing", 10,
                  {Sql("SELECT current_setting('search_path')")}, &path));
  EXPECT_EQ(path[0].sql().rows(0).fields(0).text(),
            "\"shadow\",\"public\",pg_temp");
  absl::Status stale =
      Apply(shadowed.get(), "billing", 9,
            {Sql("UPDATE jobs SET owner = 'late' WHERE id = 1")});
  EXPECT_THAT(stale, StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_TRUE(GetStaleToken(stale).has_value()) << stale;
  EXPECT_EQ(GetStaleToken(stale)->highest_token, 10u);
  EXPECT_EQ(Count("owner = 'late'"), 0);
  Exec("DROP SCHEMA shadow CASCADE");
}

// Transaction control cannot end, split or open a Write's transaction,
// however it is spelled or reached.
TEST_F(PostgresIsolationTest, NothingEndsOrSplitsAWritesTransaction) {
  Exec(
      "CREATE OR REPLACE PROCEDURE commit_midway() LANGUAGE plpgsql AS "
      "$$BEGIN INSERT INTO jobs (id) VALUES (5); COMMIT; END$$");
  Exec("GRANT EXECUTE ON PROCEDURE commit_midway() TO fencegate_worker");
  // Spellings PostgreSQL's lexer reads as COMMIT and the like.
  for (const char* sql :
       {"--x\rCOMMIT", "--x\r\nROLLBACK", "\fCOMMIT",
        "/* a */ /* b /* c */ */\tBEGIN", "-- one\n-- two\rABORT",
        "\r\nstart transaction", "commit and chain",
        "prepare\r\ntransaction 'x'", "Release sp", "savepoint sp"}) {
    absl::Status s =
        Apply("d", 2, {Sql("INSERT INTO jobs (id) VALUES (1)"), Sql(sql)});
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument))
        << absl::CEscape(sql);
    EXPECT_THAT(s.message(), HasSubstr("transaction control"))
        << absl::CEscape(sql);
  }
  // PostgreSQL 15's lexer does not take \v for a space (16's does): the
  // server would not run this, and the classifier, with the same parser,
  // refuses it too.
  absl::Status vt = Apply("d", 2, {Sql("\vEND")});
  EXPECT_THAT(vt, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(vt.message(), HasSubstr("does not parse"));
  // Reached through a DO block or a procedure, on a route that takes them:
  // PostgreSQL refuses, inside the BEGIN the adapter wraps them in, and
  // nothing of the Write commits.
  auto dirty = MakeAdapter("allow_dirty_statements=true");
  for (const char* sql :
       {"DO $$BEGIN COMMIT; END$$", "DO $$BEGIN ROLLBACK; END$$",
        "CALL commit_midway()",
        "DO $$BEGIN INSERT INTO jobs (id) VALUES (6); COMMIT; END$$"}) {
    absl::Status s = Apply(dirty.get(), "d", 2,
                           {Sql("INSERT INTO jobs (id) VALUES (1)"), Sql(sql),
                            Sql("INSERT INTO jobs (id) VALUES (2)")});
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument)) << sql;
    EXPECT_THAT(s.message(), HasSubstr("2D000")) << sql;
    EXPECT_EQ(Count(), 0) << sql;
    EXPECT_EQ(StoredFence("d"), 0) << sql;
  }
  // DO blocks and CALLs that do not end the transaction work, atomically.
  ASSERT_OK(Apply(dirty.get(), "d", 3,
                  {Sql("DO $$BEGIN INSERT INTO jobs (id) VALUES (7); END$$"),
                   Sql("INSERT INTO jobs (id) VALUES (8)")}));
  EXPECT_EQ(Count(), 2);
  EXPECT_EQ(StoredFence("d"), 3);
}

// A Write that fails inside its transaction block, batched with others on
// one connection, costs only its own outcome.
TEST_F(PostgresIsolationTest, AFailedWriteNeverChangesAnothersOutcome) {
  auto one =
      MakeAdapter("pool_size=1&spread_after_ms=0&allow_dirty_statements=true");
  constexpr int kWrites = 12;
  std::vector<absl::Status> outcomes(kWrites);
  std::vector<std::thread> threads;
  for (int k = 0; k < kWrites; ++k) {
    threads.emplace_back([&, k] {
      std::vector<v1::Operation> ops = {
          Sql("INSERT INTO jobs (id) VALUES ($1)", {Int(k)})};
      if (k % 4 == 1) ops.push_back(Sql("DO $$BEGIN COMMIT; END$$"));
      if (k % 4 == 2) ops.push_back(Sql("SELECT 1/0"));
      if (k % 4 == 3) {
        ops.push_back(Sql("DO $$BEGIN PERFORM 1; END$$"));
      }
      outcomes[k] = Apply(one.get(), absl::StrCat("w", k), 1, ops);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int k = 0; k < kWrites; ++k) {
    const bool should_fail = k % 4 == 1 || k % 4 == 2;
    EXPECT_EQ(outcomes[k].ok(), !should_fail) << k << ": " << outcomes[k];
    EXPECT_EQ(Count(absl::StrCat("id = ", k)), should_fail ? 0 : 1) << k;
  }
}

// libpq would cut a string at its first NUL: "delete from t<NUL> where
// id = 3" would delete every row.
TEST_F(PostgresIsolationTest, NulBytesAreRefusedBeforeAnythingIsSent) {
  ASSERT_OK(Apply("d", 1,
                  {Sql("INSERT INTO jobs (id) SELECT g FROM "
                       "generate_series(1, 5) g")}));
  const std::string cut("DELETE FROM jobs\0 WHERE id = 3", 30);
  absl::Status s = Apply("d", 2, {Sql(cut)});
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(s.message(), HasSubstr("ops[0].sql"));
  EXPECT_THAT(s.message(), HasSubstr("NUL"));
  EXPECT_THAT(Apply("d", 2,
                    {Sql("UPDATE jobs SET owner = $1 WHERE id = 1",
                         {Text(std::string("a\0b", 3))})}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // Nor may text be other than UTF-8: it names the field.
  absl::Status bad_sql = Apply("d", 2, {Sql("DELETE FROM jobs -- \xff")});
  EXPECT_THAT(bad_sql, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(bad_sql.message(), HasSubstr("ops[0].sql: not valid UTF-8"));
  absl::Status bad_param = Apply(
      "d", 2,
      {Sql("UPDATE jobs SET owner = $1 WHERE id = 1", {Text("\xc0\xaf")})});
  EXPECT_THAT(bad_param.message(),
              HasSubstr("ops[0].params[0].text: not valid UTF-8"));
  EXPECT_EQ(Count(), 5);
  EXPECT_EQ(StoredFence("d"), 1);
}

// A route whose role could get around fencing or into the host is refused,
// at start-up and on every connection, unless its URI allows it.
TEST_F(PostgresIsolationTest, PrivilegedRolesAreRefusedUnlessAllowed) {
  CreateRole("runs_programs", "LOGIN");
  Exec("GRANT pg_execute_server_program TO runs_programs");
  CreateRole("owner_member", "LOGIN");
  Exec("GRANT fencegate_owner TO owner_member");
  CreateRole("not_set_up", "LOGIN");
  ASSERT_OK(postgres::SetUpFenceSchema(server_->Conninfo(), "fencegate",
                                       "runs_programs"));
  ASSERT_OK(postgres::SetUpFenceSchema(server_->Conninfo(), "fencegate",
                                       "owner_member"));
  struct Case {
    std::string role;
    std::string says;
  };
  for (const Case& c : {Case{"postgres", "SUPERUSER"},
                        Case{"runs_programs", "pg_execute_server_program"},
                        Case{"owner_member", "fencegate_owner"},
                        Case{"not_set_up", "pg-setup"}}) {
    auto adapter = MakeAdapterAs(c.role, "pool_size=1");
    absl::StatusOr<std::string> startup = adapter->CheckAtStartup();
    EXPECT_THAT(startup.status(),
                StatusIs(absl::StatusCode::kFailedPrecondition))
        << c.role;
    EXPECT_THAT(startup.status().message(), HasSubstr(c.says)) << c.role;
    absl::Status write =
        Apply(adapter.get(), "p", 1, {Sql("INSERT INTO jobs (id) VALUES (1)")});
    EXPECT_THAT(write, StatusIs(absl::StatusCode::kFailedPrecondition))
        << c.role;
    EXPECT_THAT(write.message(), HasSubstr(c.says)) << c.role;
  }
  EXPECT_EQ(Count(), 0);
  auto allowed = MakeAdapterAs("postgres", "allow_privileged_role=true");
  absl::StatusOr<std::string> startup = allowed->CheckAtStartup();
  ASSERT_OK(startup.status());
  EXPECT_THAT(*startup, HasSubstr("superuser=yes"));
  ASSERT_OK(
      Apply(allowed.get(), "p", 1, {Sql("INSERT INTO jobs (id) VALUES (1)")}));
  auto plain = MakeAdapter("");
  absl::StatusOr<std::string> ok = plain->CheckAtStartup();
  ASSERT_OK(ok.status());
  EXPECT_THAT(*ok, HasSubstr("role fencegate_worker: superuser=no"));
  EXPECT_EQ(Count(), 1);
}

// Results are capped in bytes as well as in rows.
TEST_F(PostgresIsolationTest, ResultsAreCappedInBytes) {
  auto capped = MakeAdapter("max_result_bytes=3500");
  OpResults results;
  ASSERT_OK(Apply(capped.get(), "d", 1,
                  {Sql("SELECT repeat('x', 1000) AS r FROM "
                       "generate_series(1, 10)"),
                   Sql("SELECT 'more'")},
                  &results));
  EXPECT_EQ(results[0].sql().rows_size(), 3);
  EXPECT_TRUE(results[0].sql().truncated());
  EXPECT_EQ(results[1].sql().rows_size(), 0);
  EXPECT_TRUE(results[1].sql().truncated());
  EXPECT_EQ(results[0].sql().rows_affected(), 10u);
  EXPECT_EQ(results[0].sql().columns(0), "r");

  // The rows past the cap are read one at a time and dropped, not held: a
  // 300 MB result leaves this process's peak memory far below its size.
  OpResults big;
  ASSERT_OK(Apply(capped.get(), "d", 1,
                  {Sql("SELECT repeat('x', 1000) FROM generate_series(1, "
                       "300000)")},
                  &big));
  EXPECT_EQ(big[0].sql().rows_affected(), 300000u);
  EXPECT_TRUE(big[0].sql().truncated());
  const int64_t peak_kb = testing::ProcStatusKb(0, "VmHWM");
  EXPECT_GT(peak_kb, 0);
  if (!testing::kAddressSanitizer) {
    EXPECT_LT(peak_kb, 150 * 1024) << "peak " << peak_kb << " kB";
  }
}

// The route's statement_timeout_ms holds whatever the session sets: the
// gateway cancels a Write that runs past it (plus 1 s) itself.
TEST_F(PostgresIsolationTest, TheGatewaysDeadlineWinsOverTheSessions) {
  CreateUntimedFunction();
  auto quick = MakeAdapter("statement_timeout_ms=300");
  absl::Status s = Apply(quick.get(), "d", 1,
                         {Sql("INSERT INTO jobs (id) VALUES (1)"),
                          Sql("SELECT untimed()"), Sql("SELECT pg_sleep(60)")});
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(s.message(), HasSubstr("cancelled by the gateway"));
  EXPECT_THAT(s.message(), HasSubstr("ops[2]"));
  EXPECT_EQ(Count(), 0);
  EXPECT_EQ(StoredFence("d"), 0);
  // The route works on afterwards.
  ASSERT_OK(
      Apply(quick.get(), "d", 1, {Sql("INSERT INTO jobs (id) VALUES (2)")}));
  EXPECT_EQ(Count(), 1);
}

// The call's deadline holds too, even with the route's timeout off: the
// gateway cancels a Write its client no longer waits for.
TEST_F(PostgresIsolationTest, TheCallsDeadlineCancelsTheWrite) {
  auto patient = MakeAdapter("statement_timeout_ms=0");
  Operations ops;
  *ops.Add() = Sql("INSERT INTO jobs (id) VALUES (1)");
  *ops.Add() = Sql("SELECT pg_sleep(60)");
  WriteTarget target{"d", 1, "jobs", "", absl::Now() + absl::Milliseconds(500)};
  ASSERT_OK(patient->Validate(target, ops));
  OpResults results;
  absl::Status s = patient->Apply(target, ops, &results);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(s.message(), HasSubstr("cancelled by the gateway"));
  EXPECT_EQ(Count(), 0);
  EXPECT_EQ(StoredFence("d"), 0);
}

// At shutdown, once the gateway's grace is over, what still runs is
// cancelled and later writes fail at once.
TEST_F(PostgresIsolationTest, CancelInFlightEndsRunningStatements) {
  auto patient = MakeAdapter("statement_timeout_ms=0");
  absl::Status slow;
  std::thread writer([&] {
    slow = Apply(
        patient.get(), "d", 1,
        {Sql("INSERT INTO jobs (id) VALUES (1)"), Sql("SELECT pg_sleep(60)")});
  });
  ASSERT_TRUE(::fencegate::testing::WaitFor(
      [] {
        return Exec(
                   "SELECT count(*) FROM pg_stat_activity WHERE query = "
                   "'SELECT pg_sleep(60)' AND state = 'active'")[0][0]
                   .as<int64_t>() == 1;
      },
      absl::Seconds(20)));
  patient->CancelInFlight();
  writer.join();
  EXPECT_THAT(slow, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(slow.message(), HasSubstr("rolled back"));
  EXPECT_THAT(Apply(patient.get(), "d", 1, {Sql("SELECT 1")}),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(Count(), 0);
}

// SIGTERM: once the shutdown grace is over, a statement that would run on
// (the route's own timeout is off here) is cancelled, rolled back, and the
// gateway exits. Had it run to its end, its insert would have committed.
TEST_F(PostgresIsolationTest, ShutdownGraceCancelsWhatStillRuns) {
  testing::TempDir dir;
  auto gateway = testing::GatewayProcess::Start(
      dir.path() + "/data",
      {"--route=db=" + server_->Uri("statement_timeout_ms=0"),
       "--shutdown_grace_seconds=1"});
  ASSERT_TRUE(gateway.ok()) << gateway.status();
  auto stub = v1::Gateway::NewStub(grpc::CreateChannel(
      (*gateway)->address(), grpc::InsecureChannelCredentials()));
  grpc::Status slow;
  std::thread writer([&] {
    v1::WriteRequest request;
    request.set_domain("d");
    request.set_token(1);
    request.set_resource("db/jobs");
    request.add_ops()->mutable_sql()->set_sql(
        "INSERT INTO jobs (id) VALUES (1)");
    request.add_ops()->mutable_sql()->set_sql("SELECT pg_sleep(120)");
    v1::WriteResponse response;
    grpc::ClientContext context;
    slow = stub->Write(&context, request, &response);
  });
  ASSERT_TRUE(::fencegate::testing::WaitFor(
      [] {
        return Exec(
                   "SELECT count(*) FROM pg_stat_activity WHERE query = "
                   "'SELECT pg_sleep(120)' AND state = 'active'")[0][0]
                   .as<int64_t>() == 1;
      },
      absl::Seconds(20)));
  const int status = (*gateway)->Stop(SIGTERM);
  writer.join();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_FALSE(slow.ok());
  EXPECT_EQ(Count(), 0);  // Rolled back, not run to its end.
  EXPECT_EQ(StoredFence("d"), 0);
}

}  // namespace
}  // namespace fencegate
