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
#include "postgres/fence_hold.h"
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

// The gRPC route's held fence (docs/postgres.md, "The fence a route's
// connection holds"): a paused gateway whose idle route connection holds
// the domain holds a raise only for raise_wait_ms. The raise then ends the
// connection's backend, and the database refuses the old token, which the
// gateway itself still admits.
TEST_F(PgPortHoldTest,
       APausedGatewaysRouteConnectionHoldsARaiseOnlyForItsBound) {
  ASSERT_OK(postgres::SetUpFenceSchema(server_->Conninfo(), "fencegate",
                                       "fencegate_worker",
                                       /*raise_wait_ms=*/500));
  auto g = StartGateway();
  ASSERT_NE(g, nullptr);
  auto stub = v1::Gateway::NewStub(grpc::CreateChannel(
      g->process->address(), grpc::InsecureChannelCredentials()));
  auto write = [&](uint64_t token, const std::string& owner) {
    v1::WriteRequest request;
    request.set_domain(kDomain);
    request.set_token(token);
    request.set_resource("db/jobs");
    *request.add_ops() =
        Sql(absl::StrCat("UPDATE jobs SET owner = '", owner, "' WHERE id = 1"));
    v1::WriteResponse response;
    grpc::ClientContext context;
    return stub->Write(&context, request, &response);
  };
  // The domain's lock, held by a backend of the route's role.
  auto route_holders = [] {
    return Exec(absl::StrCat(
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a "
        "USING (pid) WHERE a.usename = 'fencegate_worker' AND "
        "l.locktype = 'advisory' AND l.granted AND l.mode = "
        "'ShareLock' AND l.classid = ",
        postgres::kHoldLockKey,
        "::oid AND l.objsubid = 2 AND l.objid = (hashtext('", kDomain,
        "') & 2147483647)::oid"))[0][0]
        .as<int64_t>();
  };
  // The first Write raises the row; the second holds it.
  for (const char* owner : {"route", "route"}) {
    grpc::Status held = write(5, owner);
    ASSERT_TRUE(held.ok()) << held.error_message();
  }
  EXPECT_EQ(route_holders(), 1);
  ASSERT_EQ(::kill(g->process->pid(), SIGSTOP), 0);
  std::future<void> next = NextHolder(6);
  const bool raised =
      next.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  ::kill(g->process->pid(), SIGCONT);
  ASSERT_TRUE(raised);
  next.get();
  EXPECT_EQ(Owner(), "new");
  EXPECT_EQ(StoredFence(kDomain), 6);
  EXPECT_EQ(route_holders(), 0);
  grpc::Status late = write(5, "late");
  EXPECT_EQ(late.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << late.error_message();
  EXPECT_EQ(Owner(), "new");
  grpc::Status after = write(6, "after");
  EXPECT_TRUE(after.ok()) << after.error_message();
  EXPECT_EQ(Owner(), "after");
  ASSERT_OK(postgres::SetUpFenceSchema(server_->Conninfo(), "fencegate",
                                       "fencegate_worker"));
}

// Break 25: raises that wait for holders inside a transaction (up to the
// schema's raise_wait_ms) each hold a thread and a fence-table connection
// of the raises' own, so that GetFence and Fence calls of other domains
// are still answered meanwhile. More raises wait than the gateway has I/O
// threads (4 on 2 cores, the default).
TEST_F(PgPortHoldTest, RaisesWaitingForHoldersLeaveOtherCallsServed) {
  ASSERT_OK(postgres::SetUpFenceSchema(server_->Conninfo(), "fencegate",
                                       "fencegate_worker",
                                       /*raise_wait_ms=*/600000));
  auto g = StartGateway({"--io_threads=4"});
  ASSERT_NE(g, nullptr);
  constexpr int kHolders = 6;
  std::vector<PGconn*> holders;
  for (int i = 0; i < kHolders; ++i) {
    PGconn* c = Connect(*g, absl::StrCat("-c fencegate.domain=held-", i,
                                         " -c fencegate.token=1"));
    ASSERT_EQ(PQstatus(c), CONNECTION_OK) << PQerrorMessage(c);
    EXPECT_EQ(Run(c, "BEGIN"), "");
    EXPECT_EQ(Run(c, "SELECT 1"), "");
    holders.push_back(c);
  }
  auto stub = v1::Gateway::NewStub(grpc::CreateChannel(
      g->process->address(), grpc::InsecureChannelCredentials()));
  std::vector<std::future<grpc::Status>> raises;
  for (int i = 0; i < kHolders; ++i) {
    raises.push_back(std::async(std::launch::async, [&stub, i] {
      v1::FenceRequest request;
      request.set_domain(absl::StrCat("held-", i));
      request.set_token(2);
      v1::FenceState state;
      grpc::ClientContext context;
      return stub->Fence(&context, request, &state);
    }));
  }
  // Every raise waits in the database for its domain's holder.
  ASSERT_TRUE(testing::WaitFor(
      [] {
        return Exec(absl::StrCat(
                   "SELECT count(*) FROM pg_locks WHERE locktype = "
                   "'advisory' AND NOT granted AND classid = ",
                   postgres::kHoldLockKey, "::oid"))[0][0]
                   .as<int64_t>() == kHolders;
      },
      absl::Seconds(60)));
  // Meanwhile, other domains are served.
  {
    v1::GetFenceRequest request;
    request.set_domain("unrelated");
    v1::FenceState state;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(30));
    grpc::Status s = stub->GetFence(&context, request, &state);
    EXPECT_TRUE(s.ok()) << s.error_message();
  }
  {
    v1::FenceRequest request;
    request.set_domain("unrelated");
    request.set_token(1);
    v1::FenceState state;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(30));
    grpc::Status s = stub->Fence(&context, request, &state);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(StoredFence("unrelated"), 1);
  }
  // The holders' transactions end: every raise lands.
  for (PGconn* c : holders) PQfinish(c);
  for (int i = 0; i < kHolders; ++i) {
    grpc::Status s = raises[i].get();
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(StoredFence(absl::StrCat("held-", i)), 2);
  }
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

// Break 9: a session's client reaches fence(), fence_next() and
// fence_seq() through a function of the application's that the gateway
// cannot see into. The database refuses them on the session's armed
// connection, so that no client raises another domain's fence (to 2^63-1,
// past the policy) or holds its row locked; the gateway moves fences there
// only through hold() and its secret.
TEST_F(PgPortHoldTest, AClientCannotMoveAFenceThroughSql) {
  Exec(
      "CREATE OR REPLACE FUNCTION public.app_run(q text) RETURNS text "
      "LANGUAGE plpgsql AS $$DECLARE r text; BEGIN EXECUTE q INTO r; "
      "RETURN r; END$$");
  Exec("GRANT EXECUTE ON FUNCTION public.app_run(text) TO fencegate_worker");
  Exec("SELECT fencegate.fence('other-lock', 3)");
  auto g = StartGateway();
  ASSERT_NE(g, nullptr);
  PGconn* c = Connect(*g, Options(5));
  ASSERT_EQ(PQstatus(c), CONNECTION_OK) << PQerrorMessage(c);
  for (const char* call :
       {"fence(''other-lock'', 9223372036854775807)",
        "fence(''new-lock'', 9223372036854775807)", "fence(''other-lock'', 3)",
        "fence_next(''other-lock'', 1000)",
        "fence_seq(''other-lock'', 3, 1000, ''h'')",
        "fence_seq(''other-lock'', 9223372036854775807, 1, ''h'')"}) {
    std::string message;
    EXPECT_EQ(Run(c,
                  absl::StrCat("SELECT public.app_run('SELECT fencegate.", call,
                               "::text')"),
                  &message),
              "42501")
        << call << ": " << message;
    EXPECT_THAT(message, HasSubstr("only its gateway moves a fence"));
  }
  EXPECT_EQ(StoredFence("other-lock"), 3);
  EXPECT_EQ(StoredFence("new-lock"), 0);
  // The session's own writes go on at its token.
  EXPECT_EQ(Run(c, "UPDATE jobs SET owner = 'five' WHERE id = 1"), "");
  PQfinish(c);
  EXPECT_EQ(Owner(), "five");
  EXPECT_EQ(StoredFence(kDomain), 5);
  // A connection the gateway did not arm (a direct writer's, the gRPC
  // route's) still raises.
  EXPECT_EQ(Exec("SELECT fencegate.fence('other-lock', 4)")[0][0].as<int64_t>(),
            4);
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
