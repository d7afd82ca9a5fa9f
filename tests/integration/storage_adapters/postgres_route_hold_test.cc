// Copyright fencegate authors.
//
// The gRPC route's held fence (docs/postgres.md, "The fence a route's
// connection holds"): a pooled connection that wrote (D, T) holds D in the
// database, its next Writes of (D, T) go out with no fence statement, a
// raise from anywhere still waits for every transaction of the old token
// and none commits after it, the held domains are bounded, and a route
// whose role could give a hold up, or whose sessions do not run at READ
// COMMITTED, calls fence() for every Write as before.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "fencegate/common/stale_token.h"
#include "metrics/scrape_gauges.h"
#include "postgres/fence_hold.h"
#include "postgres/fence_schema.h"
#include "prometheus/registry.h"
#include "tests/postgres_adapter_fixture.h"

namespace fencegate {
namespace {

using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

class PostgresRouteHoldTest : public PostgresAdapterTest {
 protected:
  static void SetUpTestSuite() {
    PostgresAdapterTest::SetUpTestSuite();
    if (server_ == nullptr) return;
    // What the held fence needs: a route role that cannot take or give up
    // an advisory lock itself (pg-setup --revoke_session_functions).
    absl::StatusOr<std::vector<std::string>> revoked =
        postgres::RevokeSessionFunctions(server_->Conninfo(),
                                         "fencegate_worker", {});
    ASSERT_OK(revoked.status());
  }

  // The domains the route's backends hold (their session-level shared
  // locks in fencegate's key space), by the domains' names among `names`.
  static std::vector<std::string> HeldDomains(
      const std::vector<std::string>& names) {
    std::vector<std::string> held;
    for (const std::string& name : names) {
      const pqxx::result r = Exec(absl::StrCat(
          "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING "
          "(pid) WHERE a.usename = 'fencegate_worker' AND l.locktype = "
          "'advisory' AND l.granted AND l.mode = 'ShareLock' AND l.classid = ",
          postgres::kHoldLockKey,
          "::oid AND l.objsubid = 2 AND l.objid = "
          "(hashtext('",
          name, "') & 2147483647)::oid"));
      if (r[0][0].as<int64_t>() > 0) held.push_back(name);
    }
    return held;
  }
};

TEST_F(PostgresRouteHoldTest, AHeldDomainsNextWritesSendNoFenceStatement) {
  auto adapter = MakeAdapter("pool_size=1");
  // The first Write raises the row, which holds nothing (a token that
  // keeps changing is not worth holding); the next one finds it unchanged
  // and holds.
  ASSERT_OK(Apply(adapter.get(), "billing", 5,
                  {Sql("INSERT INTO jobs (id) VALUES (1)")}));
  EXPECT_THAT(HeldDomains({"billing"}), ::testing::IsEmpty());
  ASSERT_OK(Apply(adapter.get(), "billing", 5, {Sql("SELECT 1")}));
  EXPECT_THAT(HeldDomains({"billing", "other"}),
              UnorderedElementsAre("billing"));
  // Without fence_hold(), only the Writes that need it fail: the held
  // domain's next Writes call nothing.
  Exec(
      "REVOKE EXECUTE ON FUNCTION fencegate.fence_hold(text, bigint, text) "
      "FROM fencegate_worker");
  absl::Cleanup grant = [] {
    Exec(
        "GRANT EXECUTE ON FUNCTION fencegate.fence_hold(text, bigint, text) "
        "TO fencegate_worker");
  };
  ASSERT_OK(Apply(adapter.get(), "billing", 5,
                  {Sql("INSERT INTO jobs (id) VALUES (2)")}));
  absl::Status other = Apply(adapter.get(), "other", 5,
                             {Sql("INSERT INTO jobs (id) VALUES (3)")});
  EXPECT_THAT(other.message(), HasSubstr("permission denied"));
  EXPECT_EQ(Count(), 2);
  EXPECT_EQ(StoredFence("billing"), 5);
}

TEST_F(PostgresRouteHoldTest, ARaiseWaitsForTheHeldTokensTransaction) {
  auto adapter = MakeAdapter("pool_size=1");
  ASSERT_OK(Apply(adapter.get(), "billing", 5,
                  {Sql("INSERT INTO jobs (id) VALUES (1)")}));
  ASSERT_OK(Apply(adapter.get(), "billing", 5, {Sql("SELECT 1")}));
  ASSERT_THAT(HeldDomains({"billing"}), UnorderedElementsAre("billing"));
  // A Write of the held token, on the held path, still running when a
  // direct writer raises the domain.
  absl::Notification applied;
  absl::Status slow_status;
  OpResults slow_results;
  Operations slow_ops;
  *slow_ops.Add() =
      Sql("INSERT INTO jobs (id, owner) SELECT 2, 'slow' FROM pg_sleep(1)");
  WriteTarget slow{"billing", 5, "jobs", ""};
  ASSERT_OK(adapter->Validate(slow, slow_ops));
  adapter->ApplyAsync(slow, slow_ops, &slow_results, [&](absl::Status s) {
    slow_status = std::move(s);
    applied.Notify();
  });
  ASSERT_TRUE(testing::WaitFor(
      [] {
        return Exec(
                   "SELECT count(*) FROM pg_stat_activity WHERE query LIKE "
                   "'%pg_sleep(1)%' AND state = 'active' AND pid <> "
                   "pg_backend_pid()")[0][0]
                   .as<int64_t>() == 1;
      },
      absl::Seconds(10)));
  // The raise waits for that transaction, so that it sees its row once
  // it has the domain.
  pqxx::connection raiser(server_->Conninfo());
  pqxx::work tx(raiser);
  EXPECT_EQ(tx.exec("SELECT fencegate.fence('billing', 6)")[0][0].as<int64_t>(),
            6);
  EXPECT_EQ(tx.exec("SELECT count(*) FROM jobs WHERE owner = 'slow'")[0][0]
                .as<int64_t>(),
            1);
  tx.commit();
  applied.WaitForNotification();
  EXPECT_OK(slow_status);
  // After it, the old token is refused by the database, whatever the
  // connection held.
  absl::Status late = Apply(adapter.get(), "billing", 5,
                            {Sql("INSERT INTO jobs (id) VALUES (3)")});
  ASSERT_TRUE(GetStaleToken(late).has_value()) << late;
  EXPECT_EQ(GetStaleToken(late)->highest_token, 6u);
  EXPECT_OK(Apply(adapter.get(), "billing", 6,
                  {Sql("INSERT INTO jobs (id) VALUES (4)")}));
  EXPECT_EQ(Count(), 3);
}

// The value of the sample `name`{route="db"[, `label`]} of `families`; -1
// if there is none.
double Sample(const std::vector<prometheus::MetricFamily>& families,
              const std::string& name,
              const std::pair<std::string, std::string>& label = {}) {
  for (const prometheus::MetricFamily& family : families) {
    if (family.name != name) continue;
    for (const prometheus::ClientMetric& m : family.metric) {
      bool match = label.first.empty();
      for (const prometheus::ClientMetric::Label& l : m.label) {
        if (l.name == label.first && l.value == label.second) match = true;
      }
      if (match) {
        return family.type == prometheus::MetricType::Gauge ? m.gauge.value
                                                            : m.counter.value;
      }
    }
  }
  return -1;
}

// The raise watch gives an idle connection's hold up at once: a raise that
// would otherwise wait a minute for it, then end its backend, goes
// through, and the backend is not ended.
TEST_F(PostgresRouteHoldTest, ARaiseIsLetThroughByTheWatchNotByItsBound) {
  ASSERT_OK(postgres::SetUpFenceSchema(server_->Conninfo(),
                                       postgres::kDefaultFenceSchema,
                                       "fencegate_worker", 60000));
  absl::Cleanup bound = [] {
    ASSERT_OK(postgres::SetUpFenceSchema(server_->Conninfo(),
                                         postgres::kDefaultFenceSchema,
                                         "fencegate_worker"));
  };
  prometheus::Registry registry;
  ScrapeGauges gauges;
  AdapterContext context;
  context.route = "db";
  context.metrics = MetricsContext{&registry, &gauges};
  auto adapter = MakeAdapter("pool_size=2", context);
  ASSERT_OK(Apply(adapter.get(), "billing", 5,
                  {Sql("INSERT INTO jobs (id) VALUES (1)")}));
  ASSERT_OK(Apply(adapter.get(), "billing", 5, {Sql("SELECT 1")}));
  ASSERT_THAT(HeldDomains({"billing"}), UnorderedElementsAre("billing"));
  EXPECT_EQ(Sample(gauges.Collect(), "fencegate_postgres_held_domains"), 1);
  absl::Notification raised;
  std::thread raise([&] {
    pqxx::connection raiser(server_->Conninfo());
    pqxx::work tx(raiser);
    tx.exec("SELECT fencegate.fence('billing', 6)");
    tx.commit();
    raised.Notify();
  });
  // Well inside the bound of a minute.
  EXPECT_TRUE(raised.WaitForNotificationWithTimeout(absl::Seconds(20)));
  raise.join();
  EXPECT_THAT(HeldDomains({"billing"}), ::testing::IsEmpty());
  const std::vector<prometheus::MetricFamily> counted = registry.Collect();
  EXPECT_EQ(Sample(counted, "fencegate_postgres_holds_given_up_total",
                   {"raise", "waiting"}),
            1);
  EXPECT_EQ(Sample(counted, "fencegate_postgres_holds_given_up_total",
                   {"raise", "own"}),
            0);
  EXPECT_EQ(Sample(counted, "fencegate_postgres_hold_closes_total"), 1);
  EXPECT_EQ(Sample(gauges.Collect(), "fencegate_postgres_held_domains"), 0);
  absl::Status late = Apply(adapter.get(), "billing", 5,
                            {Sql("INSERT INTO jobs (id) VALUES (2)")});
  ASSERT_TRUE(GetStaleToken(late).has_value()) << late;
  EXPECT_OK(Apply(adapter.get(), "billing", 6,
                  {Sql("INSERT INTO jobs (id) VALUES (3)")}));
  EXPECT_EQ(Count(), 2);
}

// A raise never waits for its own backend's lock, so a connection that
// holds a domain and raised it would keep holding it at the old token: the
// database refuses that raise (55000), and the refusal gives the lock up.
// The gateway gives a domain up on its connection before a Write of
// another token.
TEST_F(PostgresRouteHoldTest, AConnectionThatHoldsADomainCannotRaiseIt) {
  pqxx::connection worker(
      absl::StrCat("postgresql://fencegate_worker@127.0.0.1:", server_->port(),
                   "/postgres"));
  const std::string secret = "a-secret-of-sixteen-bytes-or-more";
  auto call = [&](const std::string& sql) {
    pqxx::work tx(worker);
    pqxx::result r = tx.exec(sql);
    tx.commit();
    return r;
  };
  call(absl::StrCat("SELECT fencegate.hold(NULL, NULL, '", secret, "')"));
  // The first call raises the row, and holds nothing; the second holds.
  EXPECT_FALSE(call(absl::StrCat("SELECT fencegate.fence_hold('own', 5, '",
                                 secret, "')"))[0][0]
                   .as<bool>());
  EXPECT_TRUE(call(absl::StrCat("SELECT fencegate.fence_hold('own', 5, '",
                                secret, "')"))[0][0]
                  .as<bool>());
  EXPECT_THAT(HeldDomains({"own"}), UnorderedElementsAre("own"));
  for (const std::string& raise :
       {absl::StrCat("SELECT fencegate.fence_hold('own', 6, '", secret, "')"),
        absl::StrCat("SELECT fencegate.fence_seq('own', 6, 1, 'h', '", secret,
                     "')")}) {
    try {
      call(raise);
      ADD_FAILURE() << raise << ": a holder raised its own domain";
    } catch (const pqxx::sql_error& e) {
      EXPECT_EQ(e.sqlstate(), "55000") << e.what();
    }
    call(absl::StrCat("SELECT fencegate.fence_hold('own', 5, '", secret,
                      "')"));  // held again
  }
  EXPECT_EQ(StoredFence("own"), 5);
  call(absl::StrCat("SELECT FROM fencegate.release('own', '", secret, "')"));
  EXPECT_THAT(HeldDomains({"own"}), ::testing::IsEmpty());
  EXPECT_FALSE(call(absl::StrCat("SELECT fencegate.fence_hold('own', 6, '",
                                 secret, "')"))[0][0]
                   .as<bool>());
  EXPECT_EQ(StoredFence("own"), 6);
  // Through the route, on its one connection: held at 6, then a Write of 7
  // goes after the connection's release of 6.
  auto adapter = MakeAdapter("pool_size=1");
  ASSERT_OK(Apply(adapter.get(), "own", 6, {Sql("SELECT 1")}));
  ASSERT_OK(Apply(adapter.get(), "own", 6, {Sql("SELECT 1")}));
  ASSERT_OK(Apply(adapter.get(), "own", 7, {Sql("SELECT 1")}));
  ASSERT_OK(Apply(adapter.get(), "own", 7, {Sql("SELECT 1")}));
  absl::Status late = Apply(adapter.get(), "own", 6, {Sql("SELECT 1")});
  EXPECT_TRUE(GetStaleToken(late).has_value()) << late;
}

// Each Write a new token (the advancing pattern), on whichever of the
// route's connections: the connections that hold the old one give the
// domain up first, and the database refuses every older token.
TEST_F(PostgresRouteHoldTest, EachWriteAHigherTokenAcrossConnections) {
  auto adapter = MakeAdapter("pool_size=2&spread_after_ms=0");
  for (uint64_t token = 1; token <= 20; ++token) {
    std::vector<std::thread> writers;
    std::vector<absl::Status> done(2);
    for (int i = 0; i < 2; ++i) {
      writers.emplace_back([&, i] {
        // One of the two is the domain's; the other keeps the second
        // connection busy with a domain of its own.
        done[i] = Apply(adapter.get(), i == 0 ? "adv" : absl::StrCat("side", i),
                        i == 0 ? token : 1, {Sql("SELECT 1")});
      });
    }
    for (std::thread& t : writers) t.join();
    ASSERT_TRUE(done[0].ok()) << token << ": " << done[0];
    ASSERT_TRUE(done[1].ok()) << token << ": " << done[1];
    absl::Status late = Apply(adapter.get(), "adv", token - (token > 1 ? 1 : 0),
                              {Sql("SELECT 1")});
    if (token > 1) {
      ASSERT_TRUE(GetStaleToken(late).has_value()) << late;
    }
  }
  EXPECT_EQ(StoredFence("adv"), 20);
  // A token taken from the fence table (Sequence, a lease grant) raises the
  // held domain too.
  absl::StatusOr<uint64_t> next = adapter->NextFence("adv", 1);
  ASSERT_OK(next.status());
  EXPECT_EQ(*next, 21u);
  absl::Status late = Apply(adapter.get(), "adv", 20, {Sql("SELECT 1")});
  EXPECT_TRUE(GetStaleToken(late).has_value()) << late;
}

TEST_F(PostgresRouteHoldTest, TheDomainsAConnectionHoldsAreBounded) {
  auto adapter = MakeAdapter("pool_size=1&held_domains=2");
  for (const char* domain : {"d1", "d2", "d3"}) {
    ASSERT_OK(Apply(adapter.get(), domain, 1, {Sql("SELECT 1")}));  // raise
    ASSERT_OK(Apply(adapter.get(), domain, 1, {Sql("SELECT 1")}));  // hold
  }
  // d1, the least recently used, is released before the next batch.
  ASSERT_OK(Apply(adapter.get(), "d3", 1, {Sql("SELECT 1")}));
  EXPECT_THAT(HeldDomains({"d1", "d2", "d3"}),
              UnorderedElementsAre("d2", "d3"));
  // A Write that failed after fence_hold() held its domain gives it up
  // before the next batch: the lock, a session's, outlived the rolled-back
  // transaction.
  ASSERT_OK(
      Apply(adapter.get(), "d4", 1, {Sql("INSERT INTO jobs (id) VALUES (1)")}));
  absl::Status failed =
      Apply(adapter.get(), "d4", 1, {Sql("INSERT INTO jobs (id) VALUES (1)")});
  EXPECT_THAT(failed.message(), HasSubstr("23505"));
  EXPECT_THAT(HeldDomains({"d4"}), UnorderedElementsAre("d4"));
  ASSERT_OK(Apply(adapter.get(), "d3", 1, {Sql("SELECT 1")}));
  EXPECT_THAT(HeldDomains({"d1", "d2", "d3", "d4"}),
              UnorderedElementsAre("d2", "d3"));
  // held_domains=0: every Write calls fence(), and nothing is held.
  auto unheld = MakeAdapter("pool_size=1&held_domains=0");
  ASSERT_OK(Apply(unheld.get(), "d9", 1, {Sql("SELECT 1")}));
  ASSERT_OK(Apply(unheld.get(), "d9", 1, {Sql("SELECT 1")}));
  EXPECT_THAT(HeldDomains({"d9"}), ::testing::IsEmpty());
}

TEST_F(PostgresRouteHoldTest, AWriteWithASeqOnAnArmedConnection) {
  auto adapter = MakeAdapter("pool_size=1");
  ASSERT_OK(Apply(adapter.get(), "billing", 5, {Sql("SELECT 1")}));
  Operations ops;
  *ops.Add() = Sql("INSERT INTO jobs (id) VALUES (1)");
  bool replayed = false;
  WriteTarget target{"billing", 5, "jobs", ""};
  target.seq = 1;
  target.replayed = &replayed;
  OpResults results;
  ASSERT_OK(adapter->Apply(target, ops, &results));
  EXPECT_FALSE(replayed);
  OpResults again;
  ASSERT_OK(adapter->Apply(target, ops, &again));
  EXPECT_TRUE(replayed);
  EXPECT_EQ(Count(), 1);
}

// A route whose role could give a hold up itself, or whose sessions run at
// another isolation level, holds nothing: each Write calls fence().
TEST_F(PostgresRouteHoldTest, ARouteThatCannotHoldCallsFenceEveryTime) {
  Exec(
      "ALTER DATABASE postgres SET default_transaction_isolation = "
      "'repeatable read'");
  {
    absl::Cleanup reset = [] {
      Exec("ALTER DATABASE postgres RESET default_transaction_isolation");
    };
    auto adapter = MakeAdapter("pool_size=1");
    ASSERT_OK(Apply(adapter.get(), "rr", 3,
                    {Sql("INSERT INTO jobs (id) VALUES (1)")}));
    ASSERT_OK(Apply(adapter.get(), "rr", 3, {Sql("SELECT 1")}));
    EXPECT_THAT(HeldDomains({"rr"}), ::testing::IsEmpty());
    absl::Status stale = Apply(adapter.get(), "rr", 2,
                               {Sql("INSERT INTO jobs (id) VALUES (2)")});
    EXPECT_TRUE(GetStaleToken(stale).has_value()) << stale;
  }
  Exec(
      "GRANT EXECUTE ON FUNCTION pg_advisory_unlock_all() TO "
      "fencegate_worker");
  absl::Cleanup revoke = [] {
    Exec(
        "REVOKE EXECUTE ON FUNCTION pg_advisory_unlock_all() FROM "
        "fencegate_worker");
  };
  auto adapter = MakeAdapter("pool_size=1");
  ASSERT_OK(Apply(adapter.get(), "able", 3,
                  {Sql("INSERT INTO jobs (id) VALUES (3)")}));
  ASSERT_OK(Apply(adapter.get(), "able", 3, {Sql("SELECT 1")}));
  EXPECT_THAT(HeldDomains({"able"}), ::testing::IsEmpty());
}

// A gateway of this version on a schema set up by an earlier pg-setup
// (no fence_hold()) calls fence() for each Write, as before.
TEST_F(PostgresRouteHoldTest, ASchemaWithoutFenceHoldIsServedAsBefore) {
  Exec("DROP FUNCTION fencegate.fence_hold(text, bigint, text)");
  absl::Cleanup setup = [] {
    ASSERT_OK(postgres::SetUpFenceSchema(server_->Conninfo(),
                                         postgres::kDefaultFenceSchema,
                                         "fencegate_worker"));
  };
  auto adapter = MakeAdapter("pool_size=1");
  ASSERT_OK(Apply(adapter.get(), "old", 3,
                  {Sql("INSERT INTO jobs (id) VALUES (1)")}));
  ASSERT_OK(Apply(adapter.get(), "old", 3, {Sql("SELECT 1")}));
  EXPECT_THAT(HeldDomains({"old"}), ::testing::IsEmpty());
  absl::Status stale =
      Apply(adapter.get(), "old", 2, {Sql("INSERT INTO jobs (id) VALUES (2)")});
  EXPECT_TRUE(GetStaleToken(stale).has_value()) << stale;
}

}  // namespace
}  // namespace fencegate
