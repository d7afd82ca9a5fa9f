// Copyright fencegate authors.
//
// The PostgreSQL port against an adversarial client (docs/pgwire.md,
// docs/security.md): what it cannot read exactly as the server will is
// refused, settings that change how the server reads text are pinned, no
// session reaches another's backend or random seed, a client that leaves
// takes its statement with it, and no input takes the gateway down.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>

#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "libpq-fe.h"
#include "pgwire/frontend.h"
#include "pgwire/startup.h"
#include "tests/pg_port_fixture.h"

namespace fencegate {
namespace {

using ::testing::HasSubstr;

class PgPortHardeningTest : public PgPortTest {
 protected:
  // A libpq connection to the port; `options` as PGOPTIONS would give them.
  static PGconn* Connect(const Gateway& g, const std::string& options,
                         const std::string& database = "db") {
    const std::string conninfo = absl::StrCat("host=127.0.0.1 port=", g.pg_port,
                                              " user=worker dbname=", database,
                                              " options='", options, "'");
    return PQconnectdb(conninfo.c_str());
  }

  // Runs `sql` as a simple query; the SQLSTATE of its first error, or ""
  // if every statement succeeded. `message`: that error's text.
  static std::string Run(PGconn* c, const std::string& sql,
                         std::string* message = nullptr) {
    std::string state;
    if (PQsendQuery(c, sql.c_str()) != 1) {
      if (message != nullptr) *message = PQerrorMessage(c);
      return "send failed";
    }
    while (PGresult* r = PQgetResult(c)) {
      if (PQresultStatus(r) == PGRES_FATAL_ERROR && state.empty()) {
        const char* s = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        state = s != nullptr ? s : "no sqlstate";
        if (message != nullptr) *message = PQresultErrorMessage(r);
      }
      PQclear(r);
    }
    if (PQstatus(c) != CONNECTION_OK && state.empty()) state = "closed";
    return state;
  }

  // The gateway still serves: its process runs and a new session reads.
  static bool Serves(const Gateway& g) {
    if (kill(g.process->pid(), 0) != 0) return false;
    std::string out, err;
    return Psql(g, "", {"SELECT 1"}, &out, &err) == 0;
  }

  // `terms` terms of 1+1+...: a parse tree `terms` levels deep.
  static std::string DeepSum(int terms) {
    std::string sql = "SELECT 1";
    sql.reserve(sql.size() + 2 * static_cast<size_t>(terms));
    for (int i = 1; i < terms; ++i) sql += "+1";
    return sql;
  }
};

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
      "LANGUAGE sql AS $$SELECT set_config('standard_conforming_strings', "
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
}

// A client that ends its session while its statement runs takes the
// statement with it within the route's statement timeout and a second,
// whatever it set; one that vanishes mid-transaction, at once.
TEST_F(PgPortHardeningTest, AClientThatLeavesTakesItsStatementWithIt) {
  auto g = StartGateway({}, "statement_timeout_ms=500");
  ASSERT_NE(g, nullptr);
  auto sleeping = [] {
    return Exec(
               "SELECT count(*) FROM pg_stat_activity WHERE usename = "
               "'fencegate_worker' AND wait_event = 'PgSleep'")[0][0]
        .as<int64_t>();
  };
  for (const char* sql :
       {"SET statement_timeout = 0; SELECT pg_sleep(3600)",
        "BEGIN; SET LOCAL statement_timeout = 0; SELECT pg_sleep(3600)"}) {
    PGconn* c = Connect(*g, Options(1));
    ASSERT_EQ(PQstatus(c), CONNECTION_OK) << PQerrorMessage(c);
    ASSERT_EQ(PQsendQuery(c, sql), 1);
    ASSERT_TRUE(
        testing::WaitFor([&] { return sleeping() == 1; }, absl::Seconds(30)))
        << sql;
    PQfinish(c);  // Terminate, then the socket closes
    EXPECT_TRUE(
        testing::WaitFor([&] { return sleeping() == 0; }, absl::Seconds(30)))
        << sql;
  }
  EXPECT_TRUE(Serves(*g));
}

// The route's statement timeout and a second bound a statement however it
// keeps the session busy: streaming notices (which used to count as the
// server being heard from), or sending rows to a client that reads none
// (whose backend, blocked writing, takes no cancel): each is stopped, and
// its backend ends or goes idle, so that no raise waits on it.
TEST_F(PgPortHardeningTest, AStatementThatStreamsNoticesOrIsNotReadIsStopped) {
  auto g = StartGateway({}, "statement_timeout_ms=500");
  ASSERT_NE(g, nullptr);
  auto running = [] {
    return Exec(
               "SELECT count(*) FROM pg_stat_activity WHERE usename = "
               "'fencegate_worker' AND state = 'active' AND query LIKE "
               "'%generate_series%'")[0][0]
        .as<int64_t>();
  };
  for (const char* sql :
       {"SET statement_timeout = 0; DO $$BEGIN FOR i IN 1..100000 LOOP "
        "RAISE NOTICE 'still here'; PERFORM pg_sleep(0.01); END LOOP; END$$ "
        "/* generate_series */",
        "SET statement_timeout = 0; SELECT repeat('x', 1000) FROM "
        "generate_series(1, 100000000)"}) {
    PGconn* c = Connect(*g, Options(1));
    ASSERT_EQ(PQstatus(c), CONNECTION_OK) << PQerrorMessage(c);
    ASSERT_EQ(PQsendQuery(c, sql), 1);
    // The client reads nothing; the statement must stop all the same.
    ASSERT_TRUE(
        testing::WaitFor([&] { return running() == 1; }, absl::Seconds(30)))
        << sql;
    EXPECT_TRUE(
        testing::WaitFor([&] { return running() == 0; }, absl::Seconds(30)))
        << sql;
    PQfinish(c);
  }
  EXPECT_TRUE(Serves(*g));
}

// The port's fence statement cannot be swapped for a fake: a DO block that
// deallocates it and prepares "SELECT $2" under its name changes nothing,
// since the port prepares it again right before each use (and a simple
// query's fence is text). After another holder's raise, the old holder's
// transactions are refused by the database (they used to run the fake).
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
  // Extended, then simple: each transaction is refused.
  r = PQexecParams(c, "UPDATE jobs SET owner = $1 WHERE id = 1", 1, nullptr,
                   std::vector<const char*>{"stale"}.data(), nullptr, nullptr,
                   0);
  EXPECT_STREQ(PQresultErrorField(r, PG_DIAG_SQLSTATE), "FG001");
  PQclear(r);
  EXPECT_EQ(Run(c, "UPDATE jobs SET owner = 'stale' WHERE id = 1"), "FG001");
  PQfinish(c);
  EXPECT_EQ(Owner(), "nobody");
}

// Connections that never sign in cannot keep signed-in clients out: at the
// session limit the oldest of them is closed for a newcomer (they used to
// hold every slot, and 28 of 29 sign-ins were refused under a flood).
// Sessions that signed in are never shed.
TEST_F(PgPortHardeningTest, SilentConnectionsGiveWayToSignIns) {
  auto g = StartGateway({"--pg_max_connections=3"});
  ASSERT_NE(g, nullptr);
  std::vector<int> silent;
  for (int i = 0; i < 3; ++i) {
    silent.push_back(testing::ConnectLoopback(g->pg_port));
    ASSERT_GE(silent.back(), 0);
  }
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(Serves(*g)) << i;
  std::vector<PGconn*> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(Connect(*g, ""));
    EXPECT_EQ(PQstatus(held.back()), CONNECTION_OK)
        << PQerrorMessage(held.back());
  }
  PGconn* extra = Connect(*g, "");
  EXPECT_NE(PQstatus(extra), CONNECTION_OK);  // 53300, before any sign-in
  PQfinish(extra);
  for (PGconn* c : held) {
    EXPECT_EQ(Run(c, "SELECT 1"), "");
    PQfinish(c);
  }
  for (int fd : silent) ::close(fd);
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

// A raw protocol client: what it sends goes out as it is, and it reads
// whole messages.
class RawClient {
 public:
  explicit RawClient(int port) : fd_(testing::ConnectLoopback(port)) {}
  ~RawClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool Send(const std::string& bytes) {
    return ::write(fd_, bytes.data(), bytes.size()) ==
           static_cast<ssize_t>(bytes.size());
  }
  // Writes `message` again and again, without reading, until the gateway
  // stops taking them (no room for 2 s) or `limit` bytes went out; the
  // bytes that went out.
  size_t SendUntilRefused(const std::string& message, size_t limit) {
    fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
    size_t sent = 0;
    std::string batch;
    while (batch.size() < 65536) batch += message;
    while (sent < limit) {
      const ssize_t n = ::write(fd_, batch.data(), batch.size());
      if (n > 0) {
        sent += static_cast<size_t>(n);
        batch = batch.substr(static_cast<size_t>(n)) +
                std::string(batch.data(), static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) break;
      pollfd p{fd_, POLLOUT, 0};
      if (::poll(&p, 1, 2000) <= 0) break;
    }
    return sent;
  }
  // The types of the messages read up to and including the next
  // ReadyForQuery, with each DataRow's first value after a 'D'; "closed"
  // if the connection ends first.
  std::string ReadToReady() {
    std::string seen;
    for (;;) {
      absl::StatusOr<std::optional<pgwire::Frame>> frame =
          pgwire::NextFrame(buffer_, 1 << 20);
      if (!frame.ok()) return seen + "bad";
      if (frame->has_value()) {
        const pgwire::Frame& f = **frame;
        seen += f.type;
        if (f.type == 'D' && f.body.size() > 6)
          seen += std::string(f.body.substr(6));
        buffer_.erase(0, f.size);
        if (f.type == 'Z') return seen;
        continue;
      }
      char chunk[4096];
      const ssize_t n = ::read(fd_, chunk, sizeof(chunk));
      if (n <= 0) return seen + "closed";
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

 private:
  int fd_;
  std::string buffer_;
};

std::string Messages(const std::vector<pgwire::FrontendMessage>& messages) {
  std::string bytes;
  for (const pgwire::FrontendMessage& m : messages) bytes += pgwire::Encode(m);
  return bytes;
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
    pgwire::StartupMessage startup;
    startup.parameters = {{"user", "worker"}, {"database", "db"}};
    ASSERT_TRUE(c.Send(pgwire::EncodeStartupPacket(startup)));
    EXPECT_THAT(c.ReadToReady(), HasSubstr("Z"));
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
  pgwire::StartupMessage startup;
  const std::string options = Options(1);
  startup.parameters = {
      {"user", "worker"}, {"database", "db"}, {"options", options}};
  ASSERT_TRUE(c.Send(pgwire::EncodeStartupPacket(startup)));
  EXPECT_THAT(c.ReadToReady(), HasSubstr("Z"));
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

// A client that sends and does not read cannot make its session hold more
// and more: past 4096 replies owed (here, answers to SHOW fencegate.domain
// queued behind a running statement) the port reads no more of it. It used
// to read 73 MiB of them, and hold a reply for each.
TEST_F(PgPortHardeningTest, AClientThatDoesNotReadIsNotReadEither) {
  auto g = StartGateway({}, "statement_timeout_ms=3000");
  ASSERT_NE(g, nullptr);
  RawClient c(g->pg_port);
  pgwire::StartupMessage startup;
  const std::string options = Options(1);
  startup.parameters = {
      {"user", "worker"}, {"database", "db"}, {"options", options}};
  ASSERT_TRUE(c.Send(pgwire::EncodeStartupPacket(startup)));
  EXPECT_THAT(c.ReadToReady(), HasSubstr("Z"));
  ASSERT_TRUE(c.Send(Messages({pgwire::Query{"SELECT pg_sleep(2)"}})));
  const size_t limit = size_t{64} << 20;
  const size_t sent = c.SendUntilRefused(
      Messages({pgwire::Query{"SHOW fencegate.domain"}}), limit);
  EXPECT_LT(sent, limit);
  EXPECT_GT(sent, size_t{4096} * 27);
  EXPECT_TRUE(Serves(*g));
}

// Replies a client has yet to read count in the gateway's memory budget
// (half of --memory_limit_mib: 32 MiB here), beside the message the port
// read from the server: past it, a session ends with 53200. Two clients
// that asked for 12 MB rows and read none hold 48 MB; only the server's
// copies (24 MB) used to count, and forty such clients took 600 MB.
TEST_F(PgPortHardeningTest, RepliesAClientHasNotReadCountInTheBudget) {
  auto g = StartGateway({"--memory_limit_mib=64"});
  ASSERT_NE(g, nullptr);
  std::vector<PGconn*> clients;
  for (int i = 0; i < 2; ++i) {
    PGconn* c = Connect(*g, "");
    ASSERT_EQ(PQstatus(c), CONNECTION_OK) << PQerrorMessage(c);
    ASSERT_EQ(PQsendQuery(c, "SELECT repeat('x', 12000000)"), 1);
    clients.push_back(c);
  }
  // Every server has sent its row: the port holds what the clients have not
  // read, or refused it.
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        return Exec(
                   "SELECT count(*) FROM pg_stat_activity WHERE usename = "
                   "'fencegate_worker' AND query LIKE '%repeat%' AND state "
                   "<> 'idle'")[0][0]
                   .as<int64_t>() == 0;
      },
      absl::Seconds(60)));
  int refused = 0;
  for (PGconn* c : clients) {
    while (PGresult* r = PQgetResult(c)) {
      const char* state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
      if (state != nullptr && std::string(state) == "53200") ++refused;
      PQclear(r);
    }
    PQfinish(c);
  }
  EXPECT_GE(refused, 1);
  EXPECT_TRUE(Serves(*g));
}

}  // namespace
}  // namespace fencegate
