// Copyright fencegate authors.
//
// The fence a PostgreSQL-port session's server connection holds
// (postgres/fence_hold.h, docs/pgwire.md): what PostgreSQL enforces for
// every transaction of the session, whatever the client pipelines, and the
// bound a paused gateway can hold a raise for. Races are driven by what the
// server shows (a backend's wait_event in pg_stat_activity), never by time.

#include <signal.h>

#include <future>
#include <string>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "postgres/fence_schema.h"
#include "tests/pg_port_hardening_fixture.h"

namespace fencegate {
namespace {

using ::testing::HasSubstr;

class PgPortHoldTest : public PgPortHardeningTest {
 protected:
  // The route role's backends that wait in pg_sleep().
  static bool Sleeping() {
    return Exec(
               "SELECT count(*) FROM pg_stat_activity WHERE usename = "
               "'fencegate_worker' AND wait_event = 'PgSleep'")[0][0]
               .as<int64_t>() > 0;
  }

  // The next holder: raises the database's fence to `token` and writes
  // "new", in one transaction, as a direct writer does.
  static std::future<void> NextHolder(uint64_t token) {
    return std::async(std::launch::async, [token] {
      Exec(absl::StrCat("SELECT fencegate.fence('", kDomain, "', ", token,
                        "); UPDATE jobs SET owner = 'new' WHERE id = 1"));
    });
  }
};

// Breaks 3, 4 and 5: pipelines in which the server ends or skips a
// transaction that the gateway used to predict (a BEGIN skipped after an
// error; a prepared COMMIT; a DO block's COMMIT in the extended protocol).
// The old holder's UPDATE, sent after a sleep during which the next holder
// raises, used to run unfenced after the raise and overwrite the next
// holder's write. The raise now waits for the connection's hold, which the
// session gives up only once it is between two transactions.
TEST_F(PgPortHoldTest, NoPipelineWritesAfterARaise) {
  const std::string sleep_then_update =
      Messages({pgwire::Query{"SELECT pg_sleep(2)"},
                pgwire::Query{"UPDATE jobs SET owner = 'old' WHERE id = 1"}});
  // The name, the messages, and how many ReadyForQuery they are answered
  // with.
  const std::vector<std::tuple<std::string, std::string, int>> cases = {
      {"a BEGIN skipped after an error",
       Messages({pgwire::Query{"SELECT 1/0; BEGIN"}}) + sleep_then_update, 3},
      {"a prepared COMMIT",
       Messages({pgwire::Parse{"c", "COMMIT", {}}, pgwire::Sync{},
                 pgwire::Query{"BEGIN"}, pgwire::Bind{"", "c", {}, {}, {}},
                 pgwire::Execute{}, pgwire::Sync{}}) +
           sleep_then_update,
       5},
      {"a DO block's COMMIT, extended",
       Messages({pgwire::Parse{"",
                               "DO $$BEGIN COMMIT; PERFORM pg_sleep(2); "
                               "UPDATE jobs SET owner = 'old' WHERE id = 1; "
                               "END$$",
                               {}},
                 pgwire::Bind{}, pgwire::Execute{}, pgwire::Sync{}}),
       1},
  };
  auto g = StartGateway();
  ASSERT_NE(g, nullptr);
  uint64_t token = 5;
  for (const auto& [name, pipeline, batches] : cases) {
    SCOPED_TRACE(name);
    Exec("UPDATE jobs SET owner = 'nobody' WHERE id = 1");
    Exec(absl::StrCat("SELECT fencegate.fence('", kDomain, "', ", token, ")"));
    RawClient c(g->pg_port);
    ASSERT_THAT(c.SignIn(Options(token)), ::testing::EndsWith("Z"));
    ASSERT_TRUE(c.Send(pipeline));
    ASSERT_TRUE(testing::WaitFor(Sleeping, absl::Seconds(30)));
    std::future<void> next = NextHolder(token + 1);
    ASSERT_EQ(next.wait_for(std::chrono::seconds(60)),
              std::future_status::ready);
    next.get();
    // Every reply of the pipeline: the old holder's UPDATE has run, or
    // failed, by now.
    for (int i = 0; i < batches; ++i) {
      EXPECT_THAT(c.ReadToReady(), ::testing::EndsWith("Z")) << i;
    }
    // The old holder's write landed before the raise, or not at all; never
    // after the next holder's.
    EXPECT_EQ(Owner(), "new");
    EXPECT_EQ(StoredFence(kDomain), static_cast<int64_t>(token + 1));
    token += 2;
  }
}

// A gateway that is paused (SIGSTOP) holds a raise no longer than the
// schema's raise_wait_ms: the raise then ends the holder's backend, whose
// transaction rolls back.
TEST_F(PgPortHoldTest, APausedGatewayHoldsARaiseOnlyForItsBound) {
  ASSERT_OK(postgres::SetUpFenceSchema(server_->Conninfo(), "fencegate",
                                       "fencegate_worker",
                                       /*raise_wait_ms=*/500));
  auto g = StartGateway();
  ASSERT_NE(g, nullptr);
  Exec(absl::StrCat("SELECT fencegate.fence('", kDomain, "', 5)"));
  PGconn* c = Connect(*g, Options(5));
  ASSERT_EQ(PQstatus(c), CONNECTION_OK) << PQerrorMessage(c);
  EXPECT_EQ(Run(c, "BEGIN"), "");
  EXPECT_EQ(Run(c, "UPDATE jobs SET owner = 'paused' WHERE id = 1"), "");
  ASSERT_EQ(::kill(g->process->pid(), SIGSTOP), 0);
  std::future<void> next = NextHolder(6);
  const bool raised =
      next.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  ::kill(g->process->pid(), SIGCONT);
  ASSERT_TRUE(raised);
  next.get();
  EXPECT_EQ(Owner(), "new");
  EXPECT_EQ(StoredFence(kDomain), 6);
  EXPECT_EQ(WorkerBackends("idle in transaction"), 0);
  // The old holder's transaction is gone with its backend.
  EXPECT_NE(Run(c, "COMMIT"), "");
  PQfinish(c);
  EXPECT_EQ(Owner(), "new");
  ASSERT_OK(postgres::SetUpFenceSchema(server_->Conninfo(), "fencegate",
                                       "fencegate_worker"));
}

// The client can neither release its connection's hold nor take one: the
// port refuses the statements that could, and the database refuses the
// route role the functions (pg-setup --revoke_session_functions) and the
// hold without the gateway's secret.
TEST_F(PgPortHoldTest, TheClientCannotReleaseOrTakeAHold) {
  auto g = StartGateway();
  ASSERT_NE(g, nullptr);
  PGconn* c = Connect(*g, Options(5));
  ASSERT_EQ(PQstatus(c), CONNECTION_OK) << PQerrorMessage(c);
  EXPECT_EQ(Run(c, "DISCARD ALL"), "0A000");
  EXPECT_EQ(Run(c, "SELECT pg_advisory_unlock_all()"), "0A000");
  EXPECT_EQ(Run(c, "SELECT pg_catalog.pg_advisory_unlock_shared(1, 2)"),
            "0A000");
  std::string message;
  EXPECT_EQ(Run(c,
                absl::StrCat("SELECT fencegate.hold('", kDomain,
                             "', 5, 'a client guess of the secret')"),
                &message),
            "42501")
      << message;
  PQfinish(c);
  // Straight to the database, as the route role: not even reachable.
  pqxx::connection direct(
      absl::StrCat(server_->Conninfo(), " user=fencegate_worker"));
  for (const char* sql : {"SELECT pg_advisory_unlock_all()",
                          "SELECT pg_advisory_xact_lock(1717923427, 1)",
                          "SELECT pg_terminate_backend(1)"}) {
    EXPECT_THROW(pqxx::nontransaction(direct).exec(sql),
                 pqxx::insufficient_privilege)
        << sql;
  }
}

// The port serves a route only where the client could not release its
// connection's hold, naming the command that makes it so.
TEST_F(PgPortHoldTest, ARouteWhoseRoleCouldReleaseTheHoldIsNotServed) {
  auto g = StartGateway();
  ASSERT_NE(g, nullptr);
  Exec("GRANT EXECUTE ON FUNCTION pg_advisory_unlock_all() TO PUBLIC");
  PGconn* c = Connect(*g, Options(5));
  EXPECT_NE(PQstatus(c), CONNECTION_OK);
  EXPECT_THAT(PQerrorMessage(c), HasSubstr("pg_advisory_unlock_all()"));
  EXPECT_THAT(PQerrorMessage(c),
              HasSubstr("fencectl pg-setup --revoke_session_functions"));
  PQfinish(c);
  Exec("REVOKE EXECUTE ON FUNCTION pg_advisory_unlock_all() FROM PUBLIC");
  c = Connect(*g, Options(5));
  EXPECT_EQ(PQstatus(c), CONNECTION_OK) << PQerrorMessage(c);
  PQfinish(c);
}

// A stale token is refused before anything is sent, and the gateway
// learns what the database holds. A token changed in a running session
// moves its connection's hold: released, then taken at the new token
// (raising the database's fence), so that a raise past the new token waits
// for the session; a change this gateway refuses moves nothing, and one the
// database refuses ends the session, which then holds nothing.
TEST_F(PgPortHoldTest, ATokenChangeMovesTheHold) {
  auto g = StartGateway();
  ASSERT_NE(g, nullptr);
  Exec(absl::StrCat("SELECT fencegate.fence('", kDomain, "', 9)"));
  PGconn* stale = Connect(*g, Options(5));
  EXPECT_NE(PQstatus(stale), CONNECTION_OK);
  EXPECT_THAT(PQerrorMessage(stale), HasSubstr("stale fencing token 5"));
  PQfinish(stale);
  EXPECT_TRUE(testing::WaitFor([&] { return GetFence(*g) == 9; }));
  PGconn* c = Connect(*g, Options(9));
  ASSERT_EQ(PQstatus(c), CONNECTION_OK) << PQerrorMessage(c);
  EXPECT_EQ(Run(c, "SET fencegate.token = 9"), "");
  EXPECT_EQ(Run(c, "SET fencegate.token = 10"), "");
  EXPECT_EQ(StoredFence(kDomain), 10);
  EXPECT_EQ(Run(c, "UPDATE jobs SET owner = 'ten' WHERE id = 1"), "");
  // The session holds 10: a raise to 11 waits for it, and it gives it up.
  std::future<void> next = NextHolder(11);
  ASSERT_EQ(next.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  next.get();
  EXPECT_NE(Run(c, "UPDATE jobs SET owner = 'late' WHERE id = 1"), "");
  PQfinish(c);
  EXPECT_EQ(Owner(), "new");
  // A change to a stale token is refused here and moves nothing: the
  // session keeps its hold at 11.
  c = Connect(*g, Options(11));
  ASSERT_EQ(PQstatus(c), CONNECTION_OK) << PQerrorMessage(c);
  EXPECT_EQ(Run(c, "SET fencegate.token = 10"), "FG001");
  EXPECT_EQ(StoredFence(kDomain), 11);
  EXPECT_EQ(Run(c, "UPDATE jobs SET owner = 'eleven' WHERE id = 1"), "");
  EXPECT_EQ(Owner(), "eleven");
  // One the database refuses (another domain, which a direct writer raised
  // past the session's token, unseen here) ends the session, which then
  // holds nothing.
  Exec("SELECT fencegate.fence('other-lock', 20)");
  EXPECT_NE(Run(c, "SET fencegate.domain = 'other-lock'"), "");
  EXPECT_EQ(Run(c, "UPDATE jobs SET owner = 'other' WHERE id = 1"),
            "send failed");
  EXPECT_EQ(StoredFence("other-lock"), 20);
  PQfinish(c);
  EXPECT_EQ(Owner(), "eleven");
}

}  // namespace
}  // namespace fencegate
