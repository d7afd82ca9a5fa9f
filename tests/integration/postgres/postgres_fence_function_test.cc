// Copyright fencegate authors.
//
// The database's fence function itself (postgres/include/postgres/
// fence_schema.h), called as a direct writer or the gateway calls it: a
// token equal to the fence keeps the row without writing a new version of
// it, and a raise waits for every open transaction that holds the fence at
// the lower token.

#include <libpq-fe.h>

#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "postgres/fence_schema.h"
#include "tests/postgres_adapter_fixture.h"

namespace fencegate {
namespace {

class PostgresFenceFunctionTest : public PostgresAdapterTest {
 protected:
  // The fence row's xmin: the transaction that wrote its current version.
  static std::string RowVersion(const std::string& domain) {
    return Exec("SELECT xmin::text FROM fencegate.fences WHERE domain = '" +
                domain + "'")[0][0]
        .as<std::string>();
  }
};

TEST_F(PostgresFenceFunctionTest, AnEqualTokenKeepsTheRowAsItIs) {
  Exec("SELECT fencegate.fence('d', 5)");
  const std::string version = RowVersion("d");
  EXPECT_EQ(Exec("SELECT fencegate.fence('d', 5)")[0][0].as<int64_t>(), 5);
  EXPECT_EQ(RowVersion("d"), version);
  EXPECT_EQ(Exec("SELECT fencegate.fence('d', 6)")[0][0].as<int64_t>(), 6);
  EXPECT_NE(RowVersion("d"), version);
  EXPECT_THROW(Exec("SELECT fencegate.fence('d', 5)"), pqxx::sql_error);
  EXPECT_EQ(StoredFence("d"), 6);
}

// hold() (postgres/fence_hold.h) arms its backend, raises a lower row to
// the token and holds it; above the token it holds nothing. An armed
// backend may not call fence(), fence_next() or fence_seq(): only hold()
// moves a fence there.
TEST_F(PostgresFenceFunctionTest, HoldRaisesALowerRowAndArmsItsBackend) {
  const std::string secret = "a secret of at least sixteen bytes";
  pqxx::connection c(server_->Conninfo());
  auto hold = [&](const std::string& domain, int64_t token) {
    pqxx::work tx(c);
    const int64_t held = tx.exec_params("SELECT fencegate.hold($1, $2, $3)",
                                        domain, token, secret)[0][0]
                             .as<int64_t>();
    tx.commit();
    return held;
  };
  auto holds = [&](const std::string& domain) {
    return Exec(absl::StrCat(
               "SELECT count(*) FROM pg_locks WHERE locktype = "
               "'advisory' AND granted AND mode = 'ShareLock' AND pid = ",
               c.backendpid(), " AND objid = (hashtext('", domain,
               "') & 2147483647)::oid"))[0][0]
               .as<int64_t>() > 0;
  };
  EXPECT_EQ(hold("d", 5), 5);  // no row: raised
  EXPECT_EQ(StoredFence("d"), 5);
  EXPECT_TRUE(holds("d"));
  Exec("SELECT fencegate.fence('e', 3)");
  EXPECT_EQ(hold("e", 7), 7);  // lower: raised
  EXPECT_EQ(StoredFence("e"), 7);
  Exec("SELECT fencegate.fence('f', 9)");
  EXPECT_EQ(hold("f", 7), 9);  // higher: stale, nothing held
  EXPECT_EQ(StoredFence("f"), 9);
  EXPECT_FALSE(holds("f"));
  for (const char* sql :
       {"SELECT fencegate.fence('g', 1)", "SELECT fencegate.fence('f', 9)",
        "SELECT fencegate.fence_next('g', 1)",
        "SELECT fencegate.fence_seq('g', 1, 1, 'h')"}) {
    EXPECT_THROW(pqxx::nontransaction(c).exec(sql),
                 pqxx::insufficient_privilege)
        << sql;
  }
  EXPECT_EQ(StoredFence("g"), 0);
  // Another backend, not armed, may.
  EXPECT_EQ(Exec("SELECT fencegate.fence('g', 1)")[0][0].as<int64_t>(), 1);
}

// At READ COMMITTED, an equal token costs no row lock (no WAL record for
// it, no new row version): the transaction holds the domain's advisory lock,
// shared.
TEST_F(PostgresFenceFunctionTest, AnEqualTokenAtReadCommittedTakesNoRowLock) {
  Exec("SELECT fencegate.fence('d', 5)");
  const std::string version = RowVersion("d");
  pqxx::connection c(server_->Conninfo());
  pqxx::work tx(c);
  EXPECT_EQ(tx.exec("SELECT fencegate.fence('d', 5)")[0][0].as<int64_t>(), 5);
  // A row lock would show as the row's xmax.
  EXPECT_EQ(tx.exec("SELECT xmax::text FROM fencegate.fences WHERE domain = "
                    "'d'")[0][0]
                .as<std::string>(),
            "0");
  EXPECT_EQ(RowVersion("d"), version);
  EXPECT_EQ(Exec(absl::StrCat(
                "SELECT count(*) FROM pg_locks WHERE locktype = "
                "'advisory' AND granted AND mode = 'ShareLock' AND pid = ",
                c.backendpid(),
                " AND objid = (hashtext('d') & 2147483647)::oid"))[0][0]
                .as<int64_t>(),
            1);
  tx.commit();
}

// A fence() call that waited for a raise sees it, at every isolation
// level: stale at READ COMMITTED (the row is read again after the lock),
// a serialization failure (40001) where the snapshot predates the wait.
// Neither lets the old token's transaction go on.
TEST_F(PostgresFenceFunctionTest, AFenceThatWaitedForARaiseSeesIt) {
  int64_t token = 5;
  for (const char* level :
       {"READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE"}) {
    SCOPED_TRACE(level);
    Exec("SELECT fencegate.fence('d', " + std::to_string(token) + ")");
    pqxx::connection raiser(server_->Conninfo());
    pqxx::work raise(raiser);
    raise.exec("SELECT fencegate.fence('d', " + std::to_string(token + 1) +
               ")");

    absl::Notification done;
    std::string outcome;
    std::thread old_holder([&] {
      pqxx::connection c(server_->Conninfo());
      pqxx::work tx(c);
      tx.exec(std::string("SET TRANSACTION ISOLATION LEVEL ") + level);
      try {
        tx.exec("SELECT fencegate.fence('d', " + std::to_string(token) + ")");
        outcome = "admitted";
      } catch (const pqxx::serialization_failure&) {  // no sql_error in 6.4
        outcome = "40001";
      } catch (const pqxx::sql_error& e) {
        outcome = e.sqlstate();
      }
      done.Notify();
    });
    // The old token's call is seen waiting for the raise's locks.
    ASSERT_TRUE(testing::WaitFor(
        [&] {
          return done.HasBeenNotified() ||
                 Exec(
                     "SELECT count(*) FROM pg_stat_activity WHERE "
                     "wait_event_type = 'Lock' AND query LIKE "
                     "'%fence(''d'', " +
                     std::to_string(token) + ")%'")[0][0]
                         .as<int64_t>() > 0;
        },
        absl::Seconds(30)));
    EXPECT_FALSE(done.HasBeenNotified()) << "did not wait: " << outcome;
    raise.commit();
    old_holder.join();
    if (std::string(level) == "READ COMMITTED") {
      EXPECT_EQ(outcome, "FG001");
    } else {
      EXPECT_EQ(outcome, "40001");
    }
    EXPECT_EQ(StoredFence("d"), token + 1);
    token += 2;
  }
}

// A direct writer's open transaction holds a raise no longer than the
// schema's raise_wait_ms: the raise then ends its backend, and its
// transaction rolls back.
TEST_F(PostgresFenceFunctionTest, AnOpenTransactionHoldsARaiseOnlyForItsBound) {
  ASSERT_OK(postgres::SetUpFenceSchema(server_->Conninfo(), "fencegate",
                                       "fencegate_worker",
                                       /*raise_wait_ms=*/200));
  Exec("SELECT fencegate.fence('d', 5)");
  Exec("GRANT INSERT ON jobs TO fencegate_worker");
  // Not a superuser, whose backend the raise could not end. libpq, not
  // libpqxx: libpqxx 6.4 leaks a result when its connection is ended under
  // it.
  PGconn* c = PQconnectdb(
      absl::StrCat(server_->Conninfo(), " user=fencegate_worker").c_str());
  ASSERT_EQ(PQstatus(c), CONNECTION_OK) << PQerrorMessage(c);
  const int pid = PQbackendPID(c);
  auto run = [c](const char* sql) {
    PGresult* r = PQexec(c, sql);
    const ExecStatusType status = PQresultStatus(r);
    PQclear(r);
    return status;
  };
  ASSERT_EQ(run("BEGIN"), PGRES_COMMAND_OK);
  ASSERT_EQ(run("SELECT fencegate.fence('d', 5)"), PGRES_TUPLES_OK);
  ASSERT_EQ(run("INSERT INTO jobs (id) VALUES (1)"), PGRES_COMMAND_OK);
  EXPECT_EQ(Exec("SELECT fencegate.fence('d', 6)")[0][0].as<int64_t>(), 6);
  EXPECT_EQ(Exec(absl::StrCat("SELECT count(*) FROM pg_stat_activity WHERE "
                              "pid = ",
                              pid))[0][0]
                .as<int64_t>(),
            0);
  EXPECT_NE(run("COMMIT"), PGRES_COMMAND_OK);
  PQfinish(c);
  EXPECT_EQ(Exec("SELECT count(*) FROM jobs")[0][0].as<int64_t>(), 0);
  EXPECT_EQ(StoredFence("d"), 6);
  ASSERT_OK(postgres::SetUpFenceSchema(server_->Conninfo(), "fencegate",
                                       "fencegate_worker"));
}

// At every isolation level: an equal token's transaction holds the
// domain's lock (READ COMMITTED) or the row's (the others), shared, and a
// raise waits for it.
TEST_F(PostgresFenceFunctionTest, ARaiseWaitsForTheLowerTokensTransactions) {
  int64_t token = 5;
  for (const char* level :
       {"READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE"}) {
    SCOPED_TRACE(level);
    Exec("SELECT fencegate.fence('d', " + std::to_string(token) + ")");
    pqxx::connection old_holder(server_->Conninfo());
    pqxx::work open(old_holder);
    open.exec(std::string("SET TRANSACTION ISOLATION LEVEL ") + level);
    open.exec("SELECT fencegate.fence('d', " + std::to_string(token) + ")");
    const int old_pid = old_holder.backendpid();

    absl::Notification raised;
    int new_pid = 0;
    std::thread raiser([&] {
      pqxx::connection c(server_->Conninfo());
      new_pid = c.backendpid();
      pqxx::work tx(c);
      tx.exec("SELECT fencegate.fence('d', " + std::to_string(token + 1) + ")");
      tx.commit();
      raised.Notify();
    });
    // The raiser is seen blocked on a lock held by the old holder's open
    // transaction -- or, if it never waited, done, and the test fails.
    ASSERT_TRUE(testing::WaitFor(
        [&] {
          if (raised.HasBeenNotified()) return true;
          return Exec(
                     "SELECT count(*) FROM pg_stat_activity WHERE "
                     "wait_event_type = 'Lock' AND pid <> " +
                     std::to_string(old_pid))[0][0]
                     .as<int64_t>() > 0;
        },
        absl::Seconds(30)));
    EXPECT_FALSE(raised.HasBeenNotified())
        << "the raise did not wait for the open transaction at token " << token;
    EXPECT_EQ(StoredFence("d"), token);
    open.commit();
    raiser.join();
    EXPECT_TRUE(raised.HasBeenNotified());
    EXPECT_NE(new_pid, 0);
    EXPECT_EQ(StoredFence("d"), token + 1);
    token += 2;
  }
}

}  // namespace
}  // namespace fencegate
