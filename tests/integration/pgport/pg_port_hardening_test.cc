// Copyright fencegate authors.
//
// The PostgreSQL port against an adversarial client (docs/pgwire.md,
// docs/security.md): what it cannot read exactly as the server will is
// refused, settings that change how the server reads text are pinned,
// replies stay matched to what asked for them, no session reaches
// another's backend or random seed, and no input takes the gateway down.
// Liveness, memory and slots: pg_port_limits_test.cc.

#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "libpq-fe.h"
#include "pgwire/frontend.h"
#include "tests/pg_port_hardening_fixture.h"

namespace fencegate {
namespace {

using ::testing::HasSubstr;

// A startup packet naming a database that is no route is answered with
// 3D000 before anything else happens, and the gateway serves on (it used
// to abort right after sending the error).
TEST_F(PgPortHardeningTest, AStartupNamingNoRouteLeavesTheGatewayServing) {
  auto g = StartGateway();
  ASSERT_NE(g, nullptr);
  for (int i = 0; i < 3; ++i) {
    PGconn* c = Connect(*g, "", "nosuch");
    EXPECT_NE(PQstatus(c), CONNECTION_OK);
    EXPECT_THAT(PQerrorMessage(c),
                HasSubstr("database \"nosuch\" is not a PostgreSQL route of "
                          "this gateway; its PostgreSQL routes: db"));
    PQfinish(c);
  }
  EXPECT_TRUE(Serves(*g));
}

// A query whose parse tree nests 30 000 levels (60 KB of 1+1+...) is
// refused as the parser's bound says, on the port's own thread, and the
// gateway serves on (it used to die of a stack overflow).
TEST_F(PgPortHardeningTest, ADeepExpressionIsRefusedNotACrash) {
  auto g = StartGateway();
  ASSERT_NE(g, nullptr);
  PGconn* c = Connect(*g, Options(1));
  ASSERT_EQ(PQstatus(c), CONNECTION_OK) << PQerrorMessage(c);
  std::string message;
  EXPECT_EQ(Run(c, DeepSum(30000), &message), "42601");
  EXPECT_THAT(message, HasSubstr("nests deeper than 1000 levels"));
  // The session goes on.
  EXPECT_EQ(Run(c, "UPDATE jobs SET owner = 'w1' WHERE id = 1"), "");
  PQfinish(c);
  EXPECT_EQ(Owner(), "w1");
  EXPECT_TRUE(Serves(*g));
}

// The same through the gRPC route: the Write is refused INVALID_ARGUMENT
// from gRPC's own thread, and the gateway serves on.
TEST_F(PgPortHardeningTest, ADeepExpressionInAWriteIsRefusedNotACrash) {
  auto g = StartGateway();
  ASSERT_NE(g, nullptr);
  auto stub = v1::Gateway::NewStub(grpc::CreateChannel(
      g->process->address(), grpc::InsecureChannelCredentials()));
  v1::WriteRequest request;
  request.set_domain(kDomain);
  request.set_token(1);
  request.set_resource("db/jobs");
  *request.add_ops() = Sql(DeepSum(30000));
  v1::WriteResponse response;
  grpc::ClientContext context;
  grpc::Status status = stub->Write(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << status.error_message();
  EXPECT_THAT(status.error_message(),
              HasSubstr("nests deeper than 1000 levels"));
  EXPECT_TRUE(Serves(*g));
}

// What the parser cannot read is refused, never forwarded: a Parse whose
// tree is deeper than the bound, carrying set_config(), in a session
// without a token, used to reach the server and lift its read-only mode.
TEST_F(PgPortHardeningTest, AParseTheGatewayCannotReadIsRefused) {
  auto g = StartGateway();
  ASSERT_NE(g, nullptr);
  PGconn* c = Connect(*g, "");
  ASSERT_EQ(PQstatus(c), CONNECTION_OK) << PQerrorMessage(c);
  std::string sql =
      "SELECT set_config('default_transaction_read_only', 'off', false)";
  for (int i = 0; i < 1200; ++i) sql += " || ''";
  PGresult* r = PQprepare(c, "deep", sql.c_str(), 0, nullptr);
  EXPECT_EQ(PQresultStatus(r), PGRES_FATAL_ERROR);
  EXPECT_STREQ(PQresultErrorField(r, PG_DIAG_SQLSTATE), "42601");
  EXPECT_THAT(PQresultErrorMessage(r), HasSubstr("nests deeper"));
  PQclear(r);
  r = PQexecPrepared(c, "deep", 0, nullptr, nullptr, nullptr, 0);
  EXPECT_EQ(PQresultStatus(r), PGRES_FATAL_ERROR);
  PQclear(r);
  // Two statements in one Parse: refused here, as the server would.
  r = PQprepare(c, "two", "SELECT 1; SELECT 2", 0, nullptr);
  EXPECT_STREQ(PQresultErrorField(r, PG_DIAG_SQLSTATE), "42601");
  PQclear(r);
  EXPECT_EQ(Run(c, "UPDATE jobs SET owner = 'tokenless' WHERE id = 1"),
            "25006");
  PQfinish(c);
  EXPECT_EQ(Owner(), "nobody");
  if (HasFailure()) {
    std::ifstream log(g->process->log_path());
    std::cerr << log.rdbuf();
  }
}

// SQL text run by a function, or a PREPARE's query, cannot lift a
// tokenless session's read-only mode.
TEST_F(PgPortHardeningTest, ATokenlessSessionCannotLiftReadOnlyThroughText) {
  auto g = StartGateway();
  ASSERT_NE(g, nullptr);
  PGconn* c = Connect(*g, "");
  ASSERT_EQ(PQstatus(c), CONNECTION_OK) << PQerrorMessage(c);
  for (const std::string& sql : {
           std::string("SELECT query_to_xml($q$SELECT set_config("
                       "'default_transaction_read_only', 'off', false)$q$, "
                       "true, true, '')"),
           std::string("PREPARE p AS SELECT set_config("
                       "'default_transaction_read_only', 'off', false)"),
           std::string("SELECT lo_from_bytea(0, 'x')"),
           std::string("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE"),
       }) {
    EXPECT_EQ(Run(c, sql), "25006") << sql;
  }
  EXPECT_EQ(Run(c, "UPDATE jobs SET owner = 'tokenless' WHERE id = 1"),
            "25006");
  PQfinish(c);
  EXPECT_EQ(Owner(), "nobody");
  EXPECT_EQ(
      Exec("SELECT count(*) FROM pg_largeobject_metadata")[0][0].as<int64_t>(),
      0);
}

// standard_conforming_strings stays on and client_encoding UTF8, so that
// the gateway reads every string as the server does: with it off, one
// string here was a COMMIT and an UPDATE there.
TEST_F(PgPortHardeningTest, SettingsThatChangeHowTextIsReadArePinned) {
  auto g = StartGateway();
  ASSERT_NE(g, nullptr);
  PGconn* c = Connect(*g, Options(1));
  ASSERT_EQ(PQstatus(c), CONNECTION_OK) << PQerrorMessage(c);
  EXPECT_STREQ(PQparameterStatus(c, "standard_conforming_strings"), "on");
  EXPECT_STREQ(PQparameterStatus(c, "client_encoding"), "UTF8");
  for (const std::string& sql : {
           std::string("SET standard_conforming_strings = off"),
           std::string("SET LOCAL standard_conforming_strings TO false"),
           std::string("SELECT set_config('standard_conforming_strings', "
                       "'off', false)"),
           std::string("SET client_encoding = 'LATIN1'"),
           std::string("SET NAMES 'SJIS'"),
           std::string("SELECT set_config('client_encoding', 'LATIN1', "
                       "false)"),
           std::string("SELECT set_config(lower('CLIENT_ENCODING'), "
                       "'LATIN1', false)"),
       }) {
    std::string message;
    EXPECT_EQ(Run(c, sql, &message), "0A000") << sql;
  }
  // The pinned values themselves are no change.
  EXPECT_EQ(Run(c, "SET standard_conforming_strings = on"), "");
  EXPECT_EQ(Run(c, "SET client_encoding = 'utf-8'"), "");
  EXPECT_EQ(Run(c, "RESET standard_conforming_strings"), "");
  // The string that hid a COMMIT and an UPDATE is one SELECT for both.
  EXPECT_EQ(Run(c,
                "SELECT 'a\\' , ' ; COMMIT ; "
                "UPDATE jobs SET owner = ''hidden'' WHERE id = 1 ; -- '"),
            "");
  PQfinish(c);
  EXPECT_EQ(Owner(), "nobody");
  // At startup too.
  for (const std::string& option :
       {std::string("-c standard_conforming_strings=off"),
        std::string("-c client_encoding=LATIN1")}) {
    PGconn* bad = Connect(*g, option);
    EXPECT_NE(PQstatus(bad), CONNECTION_OK) << option;
    EXPECT_THAT(PQerrorMessage(bad), HasSubstr("through the gateway"));
    PQfinish(bad);
  }
}

// A function the parser cannot see into that changes a pinned setting
// ends the session: the server's report is the last line.
TEST_F(PgPortHardeningTest, APinnedSettingChangedUnseenEndsTheSession) {
  Exec(
      "CREATE OR REPLACE FUNCTION public.scs_off() RETURNS text "
      "LANGUAGE sql SECURITY DEFINER AS $$SELECT "
      "set_config('standard_conforming_strings', "
      "'off', false)$$");
  Exec("GRANT EXECUTE ON FUNCTION public.scs_off() TO fencegate_worker");
  auto g = StartGateway();
  ASSERT_NE(g, nullptr);
  PGconn* c = Connect(*g, Options(1));
  ASSERT_EQ(PQstatus(c), CONNECTION_OK) << PQerrorMessage(c);
  std::string message;
  Run(c, "SELECT public.scs_off()", &message);
  EXPECT_THAT(message, HasSubstr("standard_conforming_strings became"));
  EXPECT_EQ(Run(c, "UPDATE jobs SET owner = 'after' WHERE id = 1"),
            "send failed");
  PQfinish(c);
  EXPECT_EQ(Owner(), "nobody");
  Exec("DROP FUNCTION public.scs_off()");
}

// No session signals another's backend through the port.
TEST_F(PgPortHardeningTest, ASessionCannotSignalAnothersBackend) {
  auto g = StartGateway();
  ASSERT_NE(g, nullptr);
  PGconn* victim = Connect(*g, Options(1));
  ASSERT_EQ(PQstatus(victim), CONNECTION_OK) << PQerrorMessage(victim);
  PGconn* c = Connect(*g, Options(1));
  ASSERT_EQ(PQstatus(c), CONNECTION_OK) << PQerrorMessage(c);
  for (const char* fn : {"pg_terminate_backend", "pg_cancel_backend"}) {
    EXPECT_EQ(Run(c, absl::StrCat("SELECT ", fn,
                                  "(pid) FROM pg_stat_activity WHERE usename "
                                  "= 'fencegate_worker' AND pid <> "
                                  "pg_backend_pid()")),
              "0A000")
        << fn;
  }
  EXPECT_EQ(Run(victim, "UPDATE jobs SET owner = 'victim' WHERE id = 1"), "");
  PQfinish(c);
  PQfinish(victim);
  EXPECT_EQ(Owner(), "victim");
}

// A connection goes back to the pool with its random() seeded anew: the
// next session's random() is not the sequence the last one set.
TEST_F(PgPortHardeningTest, TheNextSessionsRandomIsNotTheLastOnesSeed) {
  // One idle connection at most: the next session gets the same backend.
  auto g = StartGateway({}, "pool_size=1");
  ASSERT_NE(g, nullptr);
  const std::string expected =
      Exec("SELECT setseed(0.25), random()::text")[0][1].as<std::string>();
  // pg-setup --revoke_session_functions took setseed() from the roles.
  Exec(
      "GRANT EXECUTE ON FUNCTION setseed(double precision) TO "
      "fencegate_worker, fencegate_reader");
  auto row = [&](const std::string& sql) {
    PGconn* c = Connect(*g, "");
    EXPECT_EQ(PQstatus(c), CONNECTION_OK) << PQerrorMessage(c);
    PGresult* r = PQexec(c, sql.c_str());
    std::vector<std::string> out;
    for (int i = 0; PQntuples(r) == 1 && i < PQnfields(r); ++i) {
      out.push_back(PQgetvalue(r, 0, i));
    }
    PQclear(r);
    PQfinish(c);
    return out;
  };
  const std::vector<std::string> first =
      row("SELECT setseed(0.25)::text, pg_backend_pid()::text");
  ASSERT_EQ(first.size(), 2u);
  // The connection is pooled once its reset is answered: until then a
  // session gets a new one (closed when it ends: the pool is full).
  std::string next;
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        std::vector<std::string> r =
            row("SELECT pg_backend_pid()::text, random()::text");
        if (r.size() != 2 || r[0] != first[1]) return false;
        next = r[1];
        return true;
      },
      absl::Seconds(30)));
  EXPECT_NE(next, expected);
  Exec(
      "REVOKE EXECUTE ON FUNCTION setseed(double precision) FROM "
      "fencegate_worker, fencegate_reader");
}

// No statement of the session's stands in for its fence: the server
// connection holds it (a DO block that prepares a fake fence statement
// under the name the port once used changes nothing). After another
// holder's raise, which waits for the session to give the domain up, the
// old holder's session has ended and nothing of it runs.
TEST_F(PgPortHardeningTest, AReplacedFenceStatementIsNeverRun) {
  auto g = StartGateway();
  ASSERT_NE(g, nullptr);
  PGconn* c = Connect(*g, Options(5));
  ASSERT_EQ(PQstatus(c), CONNECTION_OK) << PQerrorMessage(c);
  // The extended protocol once, so that the port's statement exists.
  PGresult* r =
      PQexecParams(c, "SELECT $1::int", 1, nullptr,
                   std::vector<const char*>{"1"}.data(), nullptr, nullptr, 0);
  EXPECT_EQ(PQresultStatus(r), PGRES_TUPLES_OK) << PQerrorMessage(c);
  PQclear(r);
  EXPECT_EQ(Run(c,
                "DO $$BEGIN EXECUTE 'DEALLOCATE fencegate_fence'; EXCEPTION "
                "WHEN OTHERS THEN NULL; END$$; DO $$BEGIN EXECUTE 'PREPARE "
                "fencegate_fence(text, bigint) AS SELECT $2'; END$$"),
            "");
  // The next holder raises the database's fence directly.
  Exec(absl::StrCat("SELECT fencegate.fence('", kDomain, "', 6)"));
  // Extended, then simple: the session has ended.
  r = PQexecParams(c, "UPDATE jobs SET owner = $1 WHERE id = 1", 1, nullptr,
                   std::vector<const char*>{"stale"}.data(), nullptr, nullptr,
                   0);
  EXPECT_NE(PQresultStatus(r), PGRES_COMMAND_OK);
  EXPECT_THAT(PQerrorMessage(c), HasSubstr("raised past token 5"));
  PQclear(r);
  EXPECT_EQ(Run(c, "UPDATE jobs SET owner = 'stale' WHERE id = 1"),
            "send failed");
  PQfinish(c);
  EXPECT_EQ(Owner(), "nobody");
}

// Text over 16 KB is classified on the long-text parser's thread, not the
// port's, so that its parse holds up no other session; it is served as
// any other: simple and extended, fenced, and refused when it does not
// parse.
TEST_F(PgPortHardeningTest, LongTextIsServedAsAnyOther) {
  auto g = StartGateway();
  ASSERT_NE(g, nullptr);
  PGconn* c = Connect(*g, Options(1));
  ASSERT_EQ(PQstatus(c), CONNECTION_OK) << PQerrorMessage(c);
  // 1500 columns (PostgreSQL takes at most 1664), 30 KB of text.
  std::string columns = "SELECT 0 AS a_rather_long_name_0";
  for (int i = 1; i < 1500; ++i) {
    absl::StrAppend(&columns, ", ", i, " AS a_rather_long_name_", i);
  }
  ASSERT_GT(columns.size(), 16384u);
  PGresult* r = PQexec(c, columns.c_str());
  EXPECT_EQ(PQresultStatus(r), PGRES_TUPLES_OK) << PQerrorMessage(c);
  EXPECT_EQ(PQnfields(r), 1500);
  PQclear(r);
  r = PQexecParams(c, (columns + ", $1::int AS last").c_str(), 1, nullptr,
                   std::vector<const char*>{"7"}.data(), nullptr, nullptr, 0);
  EXPECT_EQ(PQresultStatus(r), PGRES_TUPLES_OK) << PQerrorMessage(c);
  EXPECT_EQ(PQnfields(r), 1501);
  PQclear(r);
  const std::string owner(40000, 'o');
  EXPECT_EQ(Run(c, absl::StrCat("UPDATE jobs SET owner = '", owner,
                                "' WHERE id = 1")),
            "");
  EXPECT_EQ(Run(c, columns + " FROM FROM"), "42601");
  PQfinish(c);
  EXPECT_EQ(Owner(), owner);
  EXPECT_EQ(GetFence(*g), 1u);
}

// A server that allows prepared transactions is not served: a prepared
// transaction outlives its session and its fence. The database refuses
// them, whatever the gateway's parser makes of a statement.
TEST_F(PgPortHardeningTest, AServerThatAllowsPreparedTransactionsIsNotServed) {
  auto g = StartGateway();
  ASSERT_NE(g, nullptr);
  auto alter_system = [](const std::string& sql) {
    pqxx::connection admin(server_->Conninfo());
    pqxx::nontransaction tx(admin);
    tx.exec(sql);
  };
  alter_system("ALTER SYSTEM SET max_prepared_transactions = 2");
  ASSERT_OK(server_->Stop());
  ASSERT_OK(server_->Restart());
  PGconn* c = Connect(*g, Options(1));
  EXPECT_NE(PQstatus(c), CONNECTION_OK);
  EXPECT_THAT(PQerrorMessage(c), HasSubstr("allows prepared transactions "
                                           "(max_prepared_transactions = 2)"));
  PQfinish(c);
  alter_system("ALTER SYSTEM RESET max_prepared_transactions");
  ASSERT_OK(server_->Stop());
  ASSERT_OK(server_->Restart());
  EXPECT_TRUE(Serves(*g));
}

// An error in the extended protocol makes the server drop every message up
// to Sync, Queries included. The port expects no reply for them: its
// replies stay matched to what asked for them, later queries are answered
// as they should be, and the session ends and frees its slot at Terminate
// (it used to wait for replies that never came).
TEST_F(PgPortHardeningTest, QueriesSkippedAfterAnErrorLeakNoSession) {
  auto g = StartGateway({"--pg_max_connections=1"});
  ASSERT_NE(g, nullptr);
  {
    RawClient c(g->pg_port);
    EXPECT_THAT(c.SignIn(), HasSubstr("Z"));
    ASSERT_TRUE(
        c.Send(Messages({pgwire::Parse{"", "SELECT 1/0", {}}, pgwire::Bind{},
                         pgwire::Execute{}, pgwire::Query{"SELECT 1"},
                         pgwire::Query{"SELECT 2"}, pgwire::Sync{}})));
    EXPECT_EQ(c.ReadToReady(), "1EZ");  // 1/0 fails at Bind (planning)
    for (const char* n : {"42", "43"}) {
      ASSERT_TRUE(
          c.Send(Messages({pgwire::Query{absl::StrCat("SELECT ", n)}})));
      EXPECT_EQ(c.ReadToReady(), absl::StrCat("TD", n, "CZ"));
    }
    ASSERT_TRUE(c.Send(Messages({pgwire::Terminate{}})));
  }
  EXPECT_TRUE(testing::WaitFor([&] { return Serves(*g); }, absl::Seconds(30)));
}

// The gateway learns what the database holds by reading it itself, never
// from an error a client can raise: replies shifted by messages the server
// skipped, then a DO raising the fence's SQLSTATE with 2^63-1 as DETAIL,
// used to raise the gateway's fence of the domain to 2^63-1 for ever.
TEST_F(PgPortHardeningTest, AClientsErrorNeverMovesTheGatewaysFence) {
  auto g = StartGateway();
  ASSERT_NE(g, nullptr);
  ASSERT_TRUE(Fence(*g, 1).ok());
  RawClient c(g->pg_port);
  EXPECT_THAT(c.SignIn(Options(1)), HasSubstr("Z"));
  ASSERT_TRUE(c.Send(Messages(
      {pgwire::Parse{"", "SELECT 1/0", {}}, pgwire::Bind{}, pgwire::Execute{},
       pgwire::Query{"SELECT 1"}, pgwire::Query{"SELECT 2"}, pgwire::Sync{}})));
  c.ReadToReady();
  const std::string raise = absl::StrCat(
      "DO $$BEGIN RAISE EXCEPTION 'stale' USING ERRCODE = 'FG001', DETAIL = "
      "'9223372036854775807'; END$$");
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c.Send(Messages({pgwire::Query{raise}})));
    EXPECT_THAT(c.ReadToReady(), HasSubstr("E"));
  }
  ASSERT_TRUE(c.Send(Messages({pgwire::Terminate{}})));
  // The learning, if any, runs in the domain's turn: a Fence of the same
  // token queues behind it.
  ASSERT_TRUE(Fence(*g, 1).ok());
  EXPECT_EQ(GetFence(*g), 1u);
}

}  // namespace
}  // namespace fencegate
