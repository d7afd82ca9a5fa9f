// Copyright fencegate authors.
//
// The PostgreSQL port's bounds against an adversarial client
// (docs/pgwire.md): a client that leaves, streams notices or does not read
// holds no statement past the route's timeout, what it has not read counts
// in the memory budget and cannot pile up, and connections that never sign
// in give way to those that do.

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

// A client that sends and does not read cannot make its session hold more
// and more: past 4096 replies owed (here, answers to SHOW fencegate.domain
// queued behind a running statement) the port reads no more of it. It used
// to read 73 MiB of them, and hold a reply for each.
TEST_F(PgPortHardeningTest, AClientThatDoesNotReadIsNotReadEither) {
  auto g = StartGateway({}, "statement_timeout_ms=3000");
  ASSERT_NE(g, nullptr);
  RawClient c(g->pg_port);
  EXPECT_THAT(c.SignIn(Options(1)), HasSubstr("Z"));
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
// read from the server: past it, a session ends with 53200. Five clients
// that asked for 12 MB rows and read none hold 120 MB; only the server's
// copies (60 MB) used to count, and forty such clients took 600 MB. Even
// with a few MB of each reply in the kernel's socket buffers, what the
// port holds is past the budget.
TEST_F(PgPortHardeningTest, RepliesAClientHasNotReadCountInTheBudget) {
  auto g = StartGateway({"--memory_limit_mib=64"});
  ASSERT_NE(g, nullptr);
  std::vector<PGconn*> clients;
  for (int i = 0; i < 5; ++i) {
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
