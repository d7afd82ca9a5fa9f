// Copyright fencegate authors.
//
// What one Write could leave in its pooled PostgreSQL session, on a real
// server (docs/postgres.md, "Pooled sessions"): every statement that could
// is refused before anything is sent; a dirty statement (DO, CALL, a named
// statement not marked session_safe) has its session reset before the
// connection serves again; a change the classifier cannot see trips the
// tripwire, which closes the connection; and a route role that could make
// anything outlast a Write is refused.

#include <memory>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "postgres/fence_schema.h"
#include "tests/postgres_adapter_fixture.h"

namespace fencegate {
namespace {

using ::fencegate::testing::StatusIs;
using ::testing::Contains;
using ::testing::HasSubstr;

class PostgresSessionTest : public PostgresAdapterTest {
 protected:
  // The first row's first field of operation `op`'s result.
  static std::string Field(const OpResults& results, int op) {
    if (results.size() <= op || results[op].sql().rows_size() == 0) return "";
    return results[op].sql().rows(0).fields(0).text();
  }
  // The backend pid, then `probe`'s first field, on `adapter`.
  std::pair<std::string, std::string> Probe(StorageAdapter* adapter,
                                            const std::string& probe) {
    OpResults r;
    EXPECT_OK(Apply(adapter, "probe", 1,
                    {Sql("SELECT pg_backend_pid()"), Sql(probe)}, &r));
    return {Field(r, 0), Field(r, 1)};
  }
};

// Each statement that could change what a later Write on the same pooled
// session sees, and each that reaches other callers or runs SQL text of its
// own, is INVALID_ARGUMENT naming what it is; nothing is sent (the fence
// row never moves), and the session is as fresh as before.
TEST_F(PostgresSessionTest, WhatCouldOutliveAWriteIsRefusedUnsent) {
  Exec("CREATE SEQUENCE IF NOT EXISTS jobs_seq");
  Exec("GRANT USAGE ON SEQUENCE jobs_seq TO fencegate_worker");
  auto one = MakeAdapter("pool_size=1&statement_timeout_ms=12345");
  const std::pair<std::string, std::string> fresh =
      Probe(one.get(), "SELECT current_setting('statement_timeout')");
  ASSERT_EQ(fresh.second, "12345ms");
  struct Case {
    const char* sql;
    const char* says;
  };
  const Case cases[] = {
      {"SET search_path = evil, public", "SET is not allowed"},
      {"SELECT set_config('search_path', 'evil', false)", "set_config"},
      {"SET ROLE other_role", "SET is not allowed"},
      {"SET default_transaction_read_only = on", "SET is not allowed"},
      {"SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL "
       "SERIALIZABLE",
       "is not allowed"},
      {"SET statement_timeout = 0", "SET is not allowed"},
      {"SET LOCAL lock_timeout = 0", "SET LOCAL is not allowed"},
      {"SELECT set_config('synchronous_commit', 'off', false)", "set_config"},
      {"UPDATE pg_settings SET setting = '0' WHERE name = "
       "'statement_timeout'",
       "pg_settings"},
      {"ALTER ROLE CURRENT_USER SET statement_timeout = 0",
       "ALTER ROLE ... SET is not allowed"},
      {"PREPARE p AS SELECT 1", "PREPARE is not allowed"},
      {"CREATE TEMP TABLE jobs (id bigint)", "CREATE TABLE is not allowed"},
      {"SELECT * INTO TEMP scratch FROM jobs", "SELECT INTO"},
      {"LISTEN some_channel", "LISTEN is not allowed"},
      {"SELECT pg_advisory_lock(42)", "pg_advisory_lock"},
      {"DECLARE held CURSOR WITH HOLD FOR SELECT 1", "DECLARE is not allowed"},
      {"SELECT nextval('jobs_seq'), currval('jobs_seq')", "currval"},
      {"SELECT pg_cancel_backend(pid) FROM pg_stat_activity",
       "pg_cancel_backend"},
      {" ;\n commit", "transaction control (COMMIT)"},
      {";;end", "transaction control (COMMIT)"},
      {"SELECT 1; SELECT fencegate.fence('other', 99)", "2 statements"},
      {"DO $$BEGIN PERFORM set_config('a.b', 'c', false); END$$",
       "allow_dirty_statements"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.sql);
    absl::Status s =
        Apply(one.get(), "iso", 1,
              {Sql("INSERT INTO jobs (id) VALUES (77)"), Sql(c.sql)});
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(s.message(), HasSubstr("ops[1].sql: "));
    EXPECT_THAT(s.message(), HasSubstr(c.says));
  }
  EXPECT_EQ(StoredFence("iso"), 0);
  EXPECT_EQ(Count(), 0);
  EXPECT_EQ(Probe(one.get(), "SELECT current_setting('statement_timeout')"),
            fresh);
  EXPECT_EQ(StoredFence("other"), 0);
}

// A dirty Write runs, and the next Write on the same backend (pool_size=1,
// the same pid) finds the session as a fresh connection has it: reset in
// the dirty Write's own round trip, the fence call prepared again.
TEST_F(PostgresSessionTest, ADirtyWritesSessionIsResetBeforeTheNextWrite) {
  auto one = MakeAdapter(
      "pool_size=1&statement_timeout_ms=12345&allow_dirty_statements=true");
  struct Case {
    const char* poison;
    const char* probe;
    const char* fresh;
  };
  const Case cases[] = {
      {"DO $$BEGIN PERFORM set_config('statement_timeout', '0', false); "
       "END$$",
       "SELECT current_setting('statement_timeout')", "12345ms"},
      {"DO $$BEGIN EXECUTE 'SET search_path = pg_catalog'; END$$",
       "SELECT current_setting('search_path')", "\"$user\",\"public\",pg_temp"},
      {"DO $$BEGIN EXECUTE 'SET application_name = x'; END$$",
       "SELECT current_setting('application_name')", ""},
      {"DO $$BEGIN EXECUTE 'PREPARE p AS SELECT 1'; END$$",
       "SELECT count(*) FROM pg_prepared_statements WHERE name = 'p'", "0"},
      // Only the locks outside fencegate's own key (fence_hold.h) count.
      {"DO $$BEGIN PERFORM pg_advisory_lock(42); END$$",
       "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = "
       "pg_backend_pid() AND classid <> 1717923427",
       "0"},
      {"DO $$BEGIN EXECUTE 'LISTEN some_channel'; END$$",
       "SELECT count(*) FROM pg_listening_channels()", "0"},
      {"DO $$BEGIN CREATE TEMP TABLE scratch (x int); END$$",
       "SELECT count(*) FROM pg_class WHERE relname = 'scratch'", "0"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.poison);
    const std::string pid = Probe(one.get(), "SELECT 1").first;
    OpResults poisoned;
    // TEMP is not the route role's: that one fails, and its connection is
    // closed; every other one commits.
    absl::Status s = Apply(one.get(), "iso", 1, {Sql(c.poison)}, &poisoned);
    const bool temp = std::string(c.poison).find("TEMP") != std::string::npos;
    EXPECT_EQ(s.ok(), !temp) << s;
    const std::pair<std::string, std::string> after = Probe(one.get(), c.probe);
    if (!temp) {
      EXPECT_EQ(after.first, pid) << "not the same backend";
    }
    EXPECT_EQ(after.second, c.fresh);
  }
  // DISCARD ALL keeps the random() generator's state: the reset seeds it
  // again, so the next caller's random() is not the sequence a setseed()
  // in a dirty Write chose.
  const std::string chosen =
      Exec("SELECT setseed(0.25), random()::text")[0][1].as<std::string>();
  const std::string pid = Probe(one.get(), "SELECT 1").first;
  ASSERT_OK(Apply(one.get(), "iso", 1,
                  {Sql("DO $$BEGIN PERFORM setseed(0.25); END$$")}));
  const std::pair<std::string, std::string> next =
      Probe(one.get(), "SELECT random()::text");
  EXPECT_EQ(next.first, pid) << "not the same backend";
  EXPECT_NE(next.second, chosen);
}

// A dirty Write that fails inside its block costs no connection: the
// reset's ROLLBACK ends the block, and the next Write runs on the same
// backend.
TEST_F(PostgresSessionTest, AFailedDirtyWriteKeepsItsConnection) {
  auto one = MakeAdapter("pool_size=1&allow_dirty_statements=true");
  const std::string pid = Probe(one.get(), "SELECT 1").first;
  EXPECT_THAT(
      Apply(one.get(), "iso", 1, {Sql("DO $$BEGIN PERFORM 1/0; END$$")}),
      StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(Probe(one.get(), "SELECT 1").first, pid);
  ASSERT_OK(
      Apply(one.get(), "iso", 1, {Sql("INSERT INTO jobs (id) VALUES (5)")}));
  EXPECT_EQ(Count(), 1);
}

// A change no parser can see -- a function the database's owner wrote,
// called from a safe SELECT, sets a parameter the server reports -- trips
// the tripwire: the connection is closed, the next Write gets a fresh
// session, and the operator is told once, with the request id.
TEST_F(PostgresSessionTest, TheTripwireClosesASessionThatChanged) {
  Exec(
      "CREATE OR REPLACE FUNCTION sneaky() RETURNS int LANGUAGE plpgsql AS "
      "$$BEGIN PERFORM set_config('DateStyle', 'SQL, DMY', false); RETURN 1; "
      "END$$");
  Exec("GRANT EXECUTE ON FUNCTION sneaky() TO fencegate_worker");
  absl::Mutex mu;
  std::vector<std::string> warnings;
  AdapterContext context;
  context.on_warning = [&](const std::string& message) {
    absl::MutexLock lock(&mu);
    warnings.push_back(message);
  };
  auto one = MakeAdapter("pool_size=1", context);
  const std::pair<std::string, std::string> before =
      Probe(one.get(), "SELECT current_setting('DateStyle')");
  Operations ops;
  *ops.Add() = Sql("SELECT sneaky()");
  WriteTarget target{"iso", 1, "jobs", "req-42"};
  ASSERT_OK(one->Validate(target, ops));
  OpResults results;
  ASSERT_OK(one->Apply(target, ops, &results));
  const std::pair<std::string, std::string> after =
      Probe(one.get(), "SELECT current_setting('DateStyle')");
  EXPECT_NE(after.first, before.first) << "the changed session was reused";
  EXPECT_EQ(after.second, before.second);
  absl::MutexLock lock(&mu);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("DateStyle"));
  EXPECT_THAT(warnings[0], HasSubstr("req-42"));
}

// A Write that calls a function outside pg_catalog (here an application's
// helper that changes DateStyle) ends its batch: the Write queued behind it
// in the same queue runs on a session the tripwire checked -- here a new
// one -- and its date text is read as the server's default reads it.
TEST_F(PostgresSessionTest, AWriteCallingAHelperEndsItsBatch) {
  Exec(
      "CREATE OR REPLACE FUNCTION dmy() RETURNS int LANGUAGE plpgsql AS "
      "$$BEGIN PERFORM set_config('DateStyle', 'SQL, DMY', false); RETURN 1; "
      "END$$");
  Exec("GRANT EXECUTE ON FUNCTION dmy() TO fencegate_worker");
  Exec("ALTER TABLE jobs ADD COLUMN due date");
  auto one = MakeAdapter("pool_size=1&pool_wait_ms=60000");
  // Opens the connection, which reads the catalog's names.
  ASSERT_OK(Apply(one.get(), "warm", 1, {Sql("SELECT 1")}));
  pqxx::connection locker(server_->Conninfo());
  pqxx::work lock_tx(locker);
  lock_tx.exec("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE");
  struct Write {
    std::string domain;
    Operations ops;
    WriteTarget target;
    OpResults results;
    absl::Notification done;
    absl::Status status;
  };
  // Queued when ApplyAsync returns, while the only connection is busy.
  auto start = [&](const std::string& domain, const std::string& sql) {
    auto w = std::make_unique<Write>();
    w->domain = domain;
    *w->ops.Add() = Sql(sql);
    w->target = WriteTarget{w->domain, 1, "jobs", ""};
    Write* raw = w.get();
    one->ApplyAsync(raw->target, raw->ops, &raw->results,
                    [raw](absl::Status s) {
                      raw->status = std::move(s);
                      raw->done.Notify();
                    });
    return w;
  };
  auto holder = start("holder", "INSERT INTO jobs (id) VALUES (1)");
  ASSERT_TRUE(testing::WaitFor([] {
    return Exec(
               "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type "
               "= 'Lock' AND query LIKE 'INSERT INTO jobs%'")[0][0]
               .as<int64_t>() == 1;
  }));
  auto helper = start("helper", "SELECT dmy()");
  auto victim =
      start("victim", "INSERT INTO jobs (id, due) VALUES (2, '03/04/2026')");
  lock_tx.abort();
  for (Write* w : {holder.get(), helper.get(), victim.get()}) {
    w->done.WaitForNotification();
    EXPECT_TRUE(w->status.ok()) << w->domain << ": " << w->status;
  }
  EXPECT_EQ(
      Exec("SELECT due::text FROM jobs WHERE id = 2")[0][0].as<std::string>(),
      "2026-03-04");
}

// A named statement the parser cannot vouch for is dirty, whatever the
// route allows for callers' SQL; one the operator marks session_safe runs
// as safe (and the tripwire still watches it).
TEST_F(PostgresSessionTest, NamedStatementsAreDirtyUnlessMarkedSessionSafe) {
  auto one = MakeAdapter("pool_size=1");
  const std::string sets =
      "SELECT set_config('application_name', 'named', false)";
  ASSERT_OK(one->AddNamedStatement("sets_dirty", sets, false));
  ASSERT_OK(one->AddNamedStatement("sets_vouched", sets, true));
  ASSERT_OK(one->AddNamedStatement("refresh", "ANALYZE jobs", false));
  EXPECT_THAT(one->AddNamedStatement("two", "SELECT 1; SELECT 2", false),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(one->AddNamedStatement("ends", "COMMIT", true),
              StatusIs(absl::StatusCode::kInvalidArgument));
  auto named = [](const std::string& name, const std::string& sql) {
    v1::Operation op = Sql(sql);
    op.mutable_sql()->set_statement(name);
    return op;
  };
  const std::string pid = Probe(one.get(), "SELECT 1").first;
  ASSERT_OK(Apply(one.get(), "n", 1, {named("sets_dirty", sets)}));
  EXPECT_EQ(Probe(one.get(), "SELECT current_setting('application_name')"),
            std::make_pair(pid, std::string()));
  ASSERT_OK(Apply(one.get(), "n", 1, {named("refresh", "ANALYZE jobs")}));
  EXPECT_EQ(Probe(one.get(), "SELECT 1").first, pid);
  // Vouched for, so not reset: the reported parameter changed, and the
  // tripwire closes the connection rather than pass the change on.
  ASSERT_OK(Apply(one.get(), "n", 1, {named("sets_vouched", sets)}));
  const auto after =
      Probe(one.get(), "SELECT current_setting('application_name')");
  EXPECT_NE(after.first, pid);
  EXPECT_EQ(after.second, "");
  // The same text sent as a caller's own SQL is still refused.
  EXPECT_THAT(Apply(one.get(), "n", 1, {Sql(sets)}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// The route role may make nothing outlast a Write: TEMP on the database,
// CREATE on a schema, another role's membership, or settings of its own
// each refuse its connections, naming the privilege, unless the route
// allows a privileged role. pg-setup takes TEMP from the route role and
// leaves it to every other login role.
TEST_F(PostgresSessionTest, TheRouteRoleMayKeepNothing) {
  CreateRole("other_app", "LOGIN");
  CreateRole("keeps_temp", "LOGIN");
  CreateRole("creates", "LOGIN");
  CreateRole("member", "LOGIN");
  CreateRole("has_settings", "LOGIN");
  for (const char* role : {"keeps_temp", "creates", "member", "has_settings"}) {
    ASSERT_OK(
        postgres::SetUpFenceSchema(server_->Conninfo(), "fencegate", role));
  }
  // On a database where PUBLIC still has TEMP (PostgreSQL's default).
  {
    pqxx::connection admin(server_->Conninfo());
    pqxx::nontransaction tx(admin);
    tx.exec("DROP DATABASE IF EXISTS fresh");
    tx.exec("CREATE DATABASE fresh");
  }
  auto temp_of = [](const std::string& role) {
    return Exec(absl::StrCat("SELECT has_database_privilege('", role,
                             "', 'fresh', 'TEMP')"))[0][0]
        .as<bool>();
  };
  ASSERT_TRUE(temp_of("public"));
  ASSERT_OK(postgres::SetUpFenceSchema(server_->Conninfo() + " dbname=fresh",
                                       "fencegate", "fencegate_worker"));
  EXPECT_FALSE(temp_of("public"));
  EXPECT_FALSE(temp_of("fencegate_worker"));
  EXPECT_TRUE(temp_of("other_app"));
  {
    pqxx::connection admin(server_->Conninfo());
    pqxx::nontransaction tx(admin);
    tx.exec("DROP DATABASE fresh");
  }
  Exec("GRANT TEMP ON DATABASE postgres TO keeps_temp");
  Exec("DROP SCHEMA IF EXISTS scratch CASCADE");
  Exec("CREATE SCHEMA scratch");
  Exec("GRANT CREATE ON SCHEMA scratch TO creates");
  Exec("GRANT other_app TO member");
  Exec("ALTER ROLE has_settings SET work_mem = '64MB'");
  struct Case {
    const char* role;
    const char* says;
  };
  for (const Case& c : {Case{"keeps_temp", "TEMP on the database"},
                        Case{"creates", "CREATE on schema scratch"},
                        Case{"member", "member of other_app"},
                        Case{"has_settings", "work_mem=64MB"}}) {
    SCOPED_TRACE(c.role);
    auto adapter = MakeAdapterAs(c.role, "pool_size=1");
    absl::StatusOr<std::string> startup = adapter->CheckAtStartup();
    EXPECT_THAT(startup.status(),
                StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_THAT(startup.status().message(), HasSubstr(c.says));
    absl::Status write = Apply(adapter.get(), "r", 1, {Sql("SELECT 1")});
    EXPECT_THAT(write, StatusIs(absl::StatusCode::kFailedPrecondition));
    auto allowed = MakeAdapterAs(c.role, "allow_privileged_role=true");
    EXPECT_OK(allowed->CheckAtStartup().status());
  }
  EXPECT_OK(adapter_->CheckAtStartup().status());
  Exec("DROP SCHEMA scratch CASCADE");
  Exec("REVOKE other_app FROM member");
  Exec("ALTER ROLE has_settings RESET ALL");
}

// pg-setup's opt-in revokes (--revoke_session_functions): the functions
// that reach session state leave PUBLIC and the route role, and stay with
// the roles named; the route's start-up says which of them its role can
// still execute.
TEST_F(PostgresSessionTest, RevokedSessionFunctionsStayWithTheNamedRoles) {
  CreateRole("other_app", "LOGIN");
  auto can_execute = [](const std::string& role) {
    return Exec(absl::StrCat("SELECT has_function_privilege('", role,
                             "', 'set_config(text,text,boolean)', "
                             "'EXECUTE')"))[0][0]
        .as<bool>();
  };
  absl::StatusOr<std::string> before = adapter_->CheckAtStartup();
  ASSERT_OK(before.status());
  EXPECT_THAT(*before, HasSubstr(" session_functions="));
  EXPECT_THAT(*before, HasSubstr("set_config"));

  absl::StatusOr<std::vector<std::string>> revoked =
      postgres::RevokeSessionFunctions(server_->Conninfo(), "fencegate_worker",
                                       {"other_app"});
  ASSERT_OK(revoked.status());
  // Every other test runs with PostgreSQL's defaults.
  absl::Cleanup restore = [&] {
    for (const std::string& f : *revoked) {
      Exec(absl::StrCat("GRANT EXECUTE ON FUNCTION ", f, " TO PUBLIC"));
    }
  };
  EXPECT_THAT(*revoked, Contains("set_config(text,text,boolean)"));
  EXPECT_THAT(*revoked, Contains("pg_advisory_lock(bigint)"));
  EXPECT_THAT(*revoked, Contains("pg_terminate_backend(integer,bigint)"));
  EXPECT_FALSE(can_execute("public"));
  EXPECT_FALSE(can_execute("fencegate_worker"));
  EXPECT_TRUE(can_execute("other_app"));
  absl::StatusOr<std::string> after = adapter_->CheckAtStartup();
  ASSERT_OK(after.status());
  EXPECT_THAT(*after, HasSubstr("session_functions=none"));
  // Writes go on as before.
  EXPECT_OK(Apply(adapter_.get(), "after_revoke", 1,
                  {Sql("INSERT INTO jobs (id) VALUES (1)")}));

  EXPECT_THAT(postgres::RevokeSessionFunctions(
                  server_->Conninfo(), "fencegate_worker", {"fencegate_worker"})
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(postgres::RevokeSessionFunctions(
                  server_->Conninfo(), "fencegate_worker", {"nobody_here"})
                  .status(),
              StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace fencegate
