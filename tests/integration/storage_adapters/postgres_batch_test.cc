// Copyright fencegate authors.
//
// The PostgreSQL adapter under concurrent Writes, against a real PostgreSQL
// server: connections opened at once, Writes sharing a round trip in one
// batch, a batch cut short by the server, and the wait for a connection.

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "fencegate/common/stale_token.h"
#include "fencegate/common/sync_point.h"
#include "tests/postgres_adapter_fixture.h"

namespace fencegate {
namespace {

using ::fencegate::testing::StatusIs;
using ::testing::HasSubstr;

class PostgresBatchTest : public PostgresAdapterTest {
 protected:
  // Inserts ids 0..n-1 into jobs, write k in domain `prefix`k, each write
  // from a thread of its own; runs `after_first` once the first write has
  // started (to wait until its batch is held, so that the rest queue
  // behind it). Returns each write's outcome.
  std::vector<absl::Status> InsertFromThreads(
      StorageAdapter* adapter, const std::string& prefix, int n,
      const std::function<void()>& after_first) {
    std::vector<absl::Status> outcomes(n);
    std::vector<std::thread> threads;
    for (int k = 0; k < n; ++k) {
      threads.emplace_back([&, k] {
        outcomes[k] =
            Apply(adapter, absl::StrCat(prefix, k), 1,
                  {Sql("INSERT INTO jobs (id) VALUES ($1)", {Int(k)})});
      });
      if (k == 0) after_first();
    }
    for (std::thread& t : threads) t.join();
    return outcomes;
  }
};

#ifdef FENCEGATE_SYNC_POINTS
// Many connections open at once against a database without the fence
// table: each creates it IF NOT EXISTS, and the ones that lose the race
// must not fail their write. Writes are started one at a time, each
// connection's opening is held (before it connects) until all have started,
// and then they all connect at once. (spread_after_ms=0: each write that
// finds no idle connection opens one at once.)
TEST_F(PostgresBatchTest, ConcurrentFirstConnectionsAllSucceed) {
  constexpr int kConnections = 8;
  constexpr absl::Duration kPatience = absl::Seconds(20);
  auto wide = MakeAdapter(
      absl::StrCat("pool_size=", kConnections, "&spread_after_ms=0"));
  absl::Mutex mu;
  int started = 0;
  SyncPoint::Get()->SetCallback("PostgresAdapter::Open:Start", [&](void*) {
    absl::MutexLock lock(&mu);
    ++started;
    auto all_started = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      return started >= kConnections;
    };
    // Bounded, so that a failure shows as a failed expectation below.
    mu.AwaitWithTimeout(absl::Condition(&all_started), kPatience);
  });
  struct Write {
    std::string domain;  // WriteTarget only points at it.
    Operations ops;
    WriteTarget target;
    OpResults results;
    absl::Notification done;
    absl::Status status;
  };
  std::vector<std::unique_ptr<Write>> writes;
  for (int i = 0; i < kConnections; ++i) {
    auto w = std::make_unique<Write>();
    w->domain = absl::StrCat("d", i);
    *w->ops.Add() = Sql("INSERT INTO jobs (id) VALUES ($1)", {Int(i)});
    w->target = WriteTarget{w->domain, 1, "jobs", ""};
    Write* raw = w.get();
    writes.push_back(std::move(w));
    wide->ApplyAsync(raw->target, raw->ops, &raw->results,
                     [raw](absl::Status s) {
                       raw->status = std::move(s);
                       raw->done.Notify();
                     });
    // Every earlier connection is held opening, so this write opens one of
    // its own: wait until it does.
    absl::MutexLock lock(&mu);
    auto its_opening_started = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      return started > i;
    };
    if (!mu.AwaitWithTimeout(absl::Condition(&its_opening_started),
                             kPatience)) {
      ADD_FAILURE() << "write " << i << " opened no connection of its own";
      break;
    }
  }
  for (auto& w : writes) w->done.WaitForNotification();
  SyncPoint::Get()->ClearAll();
  {
    absl::MutexLock lock(&mu);
    EXPECT_EQ(started, kConnections);  // One connection opened each.
  }
  for (size_t i = 0; i < writes.size(); ++i) {
    EXPECT_TRUE(writes[i]->status.ok()) << i << ": " << writes[i]->status;
  }
  EXPECT_EQ(Count(), kConnections);
}

// Holds the first batch a sender starts until `writes` writes have been
// queued in all, so that the writes queued behind it travel together in
// the next batch; records every batch's size. Start the first write, call
// WaitForFirstBatch(), then start the rest.
class FirstBatchHold {
 public:
  explicit FirstBatchHold(int writes) : writes_(writes) {
    SyncPoint::Get()->SetCallback("PostgresAdapter::ApplyAsync:Queued",
                                  [this](void*) {
                                    absl::MutexLock lock(&mu_);
                                    ++queued_;
                                  });
    SyncPoint::Get()->SetCallback(
        "PostgresAdapter::RunBatch:Start", [this](void* arg) {
          absl::MutexLock lock(&mu_);
          sizes_.push_back(*static_cast<size_t*>(arg));
          if (sizes_.size() != 1) return;
          first_.Notify();
          auto all_queued = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
            return queued_ >= writes_;
          };
          mu_.Await(absl::Condition(&all_queued));
        });
  }
  ~FirstBatchHold() { SyncPoint::Get()->ClearAll(); }

  void WaitForFirstBatch() { first_.WaitForNotification(); }
  std::vector<size_t> sizes() {
    absl::MutexLock lock(&mu_);
    return sizes_;
  }

 private:
  const int writes_;
  absl::Mutex mu_;
  int queued_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<size_t> sizes_ ABSL_GUARDED_BY(mu_);
  absl::Notification first_;
};

// Concurrent Writes share a round trip: with one connection, the first
// batch is held until every write is queued, so the rest travel together.
// Each stays its own transaction: a stale write and a failing write in the
// batch roll back alone, and the others commit.
TEST_F(PostgresBatchTest, BatchedWritesKeepTheirOwnOutcomes) {
  constexpr int kWrites = 9;
  for (int k = 0; k < kWrites; k += 3) {
    Exec(absl::StrCat("SELECT fencegate.fence('b", k, "', 100)"));
  }
  for (int k = 1; k < kWrites; k += 3) {
    Exec(absl::StrCat("INSERT INTO jobs (id) VALUES (", 1000 + k, ")"));
  }
  auto one_connection = MakeAdapter("pool_size=1");
  FirstBatchHold hold(kWrites);
  std::vector<absl::Status> outcomes(kWrites);
  std::vector<std::thread> threads;
  for (int k = 0; k < kWrites; ++k) {
    threads.emplace_back([&, k] {
      // Stale (token 50 under 100), a duplicate key, or a new row.
      const int id = k % 3 == 1 ? 1000 + k : k;
      outcomes[k] =
          Apply(one_connection.get(), absl::StrCat("b", k), 50,
                {Sql("INSERT INTO jobs (id) VALUES ($1)", {Int(id)})});
    });
    // The first write travels alone; the rest queue behind it.
    if (k == 0) hold.WaitForFirstBatch();
  }
  for (std::thread& t : threads) t.join();

  ASSERT_EQ(hold.sizes().size(), 2u);
  EXPECT_EQ(hold.sizes()[1], static_cast<size_t>(kWrites - 1));
  for (int k = 0; k < kWrites; ++k) {
    const std::string domain = absl::StrCat("b", k);
    if (k % 3 == 0) {
      std::optional<StaleTokenInfo> info = GetStaleToken(outcomes[k]);
      ASSERT_TRUE(info.has_value()) << k << ": " << outcomes[k];
      EXPECT_EQ(info->highest_token, 100u);
      EXPECT_EQ(StoredFence(domain), 100);
      EXPECT_EQ(Count(absl::StrCat("id = ", k)), 0);
    } else if (k % 3 == 1) {
      EXPECT_THAT(outcomes[k], StatusIs(absl::StatusCode::kFailedPrecondition));
      EXPECT_THAT(outcomes[k].message(), HasSubstr("23505")) << k;
      EXPECT_EQ(StoredFence(domain), 0);  // Rolled back with the insert.
    } else {
      EXPECT_TRUE(outcomes[k].ok()) << k << ": " << outcomes[k];
      EXPECT_EQ(StoredFence(domain), 50);
      EXPECT_EQ(Count(absl::StrCat("id = ", k)), 1);
    }
  }
  EXPECT_EQ(Count(), 3 + 3);
}

// Writes queued while a connection carries a batch wait for its next
// batch, although idle connections could be opened: they travel together,
// on one connection, in one round trip.
TEST_F(PostgresBatchTest, QueuedWritesWaitForTheBusyConnection) {
  constexpr int kWrites = 6;
  auto four =
      MakeAdapter("pool_size=4&pool_wait_ms=600000&spread_after_ms=300000");
  FirstBatchHold hold(kWrites);
  // The first write travels alone; the rest queue behind it.
  std::vector<absl::Status> outcomes = InsertFromThreads(
      four.get(), "w", kWrites, [&] { hold.WaitForFirstBatch(); });
  EXPECT_THAT(hold.sizes(),
              ::testing::ElementsAre(1u, static_cast<size_t>(kWrites - 1)));
  for (int k = 0; k < kWrites; ++k) {
    EXPECT_TRUE(outcomes[k].ok()) << k << ": " << outcomes[k];
  }
  EXPECT_EQ(Count(), kWrites);
}

// A batch that takes long (here: held before it is sent) does not hold up
// the writes queued behind it for more than spread_after_ms: an idle
// connection takes them.
TEST_F(PostgresBatchTest, WritesBehindASlowBatchSpreadToAnotherConnection) {
  auto two = MakeAdapter("pool_size=2&spread_after_ms=20");
  absl::Notification first_sending, release;
  bool released = false;  // Rather than given up on after 20 s.
  std::atomic<int> spreads{0};
  SyncPoint::Get()->SetCallback("PostgresAdapter::Spread",
                                [&](void*) { ++spreads; });
  SyncPoint::Get()->SetCallback("PostgresAdapter::RunBatch:Start", [&](void*) {
    if (first_sending.HasBeenNotified()) return;
    first_sending.Notify();
    // Bounded, so that a failure shows as a failed expectation below.
    released = release.WaitForNotificationWithTimeout(absl::Seconds(20));
  });
  absl::Status slow;
  std::thread holder([&] {
    slow =
        Apply(two.get(), "slow", 1, {Sql("INSERT INTO jobs (id) VALUES (1)")});
  });
  first_sending.WaitForNotification();
  absl::Status behind =
      Apply(two.get(), "behind", 1, {Sql("INSERT INTO jobs (id) VALUES (2)")});
  release.Notify();
  holder.join();
  SyncPoint::Get()->ClearAll();
  EXPECT_TRUE(released);         // `behind` completed while the first was held.
  EXPECT_EQ(spreads.load(), 1);  // The timer, not `behind`, called a sender.
  EXPECT_OK(behind);
  EXPECT_OK(slow);
  EXPECT_EQ(Count("id = 2"), 1);
  EXPECT_EQ(Count("id = 1"), 1);
}

// The server ends the session while a batch is on its way (here: an
// administrator terminates the backend just before the first write's
// sync). Nothing of the batch was committed, so every write is retried on
// a new connection and lands exactly once.
TEST_F(PostgresBatchTest, BatchInterruptedBySessionEndIsRetried) {
  constexpr int kWrites = 6;
  auto one_connection = MakeAdapter("pool_size=1");
  ASSERT_OK(Apply(one_connection.get(), "warm", 1,
                  {Sql("INSERT INTO jobs (id) VALUES (100)")}));
  FirstBatchHold hold(kWrites);
  absl::Mutex mu;
  bool terminated = false;
  SyncPoint::Get()->SetCallback("PostgresAdapter::Apply:BeforeCommit",
                                [&](void*) {
                                  {
                                    absl::MutexLock lock(&mu);
                                    // The second batch carries the writes
                                    // queued behind the first.
                                    if (terminated || hold.sizes().size() != 2)
                                      return;
                                    terminated = true;
                                  }
                                  ASSERT_GE(TerminateClientBackends(), 1);
                                });
  // The first write travels alone; the rest queue behind it.
  std::vector<absl::Status> outcomes = InsertFromThreads(
      one_connection.get(), "r", kWrites, [&] { hold.WaitForFirstBatch(); });
  SyncPoint::Get()->ClearAll();
  EXPECT_TRUE(terminated);
  for (int k = 0; k < kWrites; ++k) {
    EXPECT_TRUE(outcomes[k].ok()) << k << ": " << outcomes[k];
  }
  EXPECT_EQ(Count(), kWrites + 1);
}

// The gateway's own deadline holds for every Write of a batch: after it
// cancels one that ran too long, it watches the next one on the connection
// again. Two slow Writes that switched the server's timeout off travel in
// one batch; both are cancelled, rolled back.
TEST_F(PostgresBatchTest, EveryWriteOfABatchIsWatched) {
  CreateUntimedFunction();
  // untimed() vouched for, so that both slow Writes share a batch (one
  // calling a function outside pg_catalog otherwise ends it).
  auto one_connection = MakeAdapter(
      "pool_size=1&statement_timeout_ms=200&session_safe_functions=untimed");
  ASSERT_OK(Apply(one_connection.get(), "warm", 1,
                  {Sql("INSERT INTO jobs (id) VALUES (100)")}));
  FirstBatchHold hold(3);
  std::vector<absl::Status> outcomes(3);
  std::vector<std::thread> threads;
  for (int k = 0; k < 3; ++k) {
    threads.emplace_back([&, k] {
      std::vector<v1::Operation> ops = {
          Sql("INSERT INTO jobs (id) VALUES ($1)", {Int(k)})};
      if (k > 0) {
        ops.push_back(Sql("SELECT untimed()"));
        ops.push_back(Sql("SELECT pg_sleep(60)"));
      }
      outcomes[k] =
          Apply(one_connection.get(), absl::StrCat("s", k), 1, std::move(ops));
    });
    if (k == 0) hold.WaitForFirstBatch();
  }
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(hold.sizes().size(), 2u);
  EXPECT_EQ(hold.sizes()[1], 2u);  // Both slow writes in one batch.
  EXPECT_OK(outcomes[0]);
  for (int k = 1; k < 3; ++k) {
    EXPECT_THAT(outcomes[k], StatusIs(absl::StatusCode::kDeadlineExceeded))
        << k;
    EXPECT_THAT(outcomes[k].message(), HasSubstr("cancelled by the gateway"))
        << k;
    EXPECT_EQ(Count(absl::StrCat("id = ", k)), 0) << k;
  }
}

// A connection takes the next batch as soon as its batch is read. If the
// server ended the session in between (here: an administrator terminates
// the backend after the first batch was read), the batch goes out on a
// fresh connection instead: its writes are sent once, not failed and
// retried.
TEST_F(PostgresBatchTest, KeptConnectionEndedBetweenBatchesIsReplaced) {
  constexpr int kWrites = 5;
  auto one_connection = MakeAdapter("pool_size=1");
  ASSERT_OK(Apply(one_connection.get(), "warm", 1,
                  {Sql("INSERT INTO jobs (id) VALUES (100)")}));
  absl::Mutex mu;
  int queued = 0;
  int started = 0;
  std::vector<size_t> sizes;  // Of the batches that went out.
  absl::Notification first_sending;
  SyncPoint::Get()->SetCallback("PostgresAdapter::ApplyAsync:Queued",
                                [&](void*) {
                                  absl::MutexLock lock(&mu);
                                  ++queued;
                                });
  SyncPoint::Get()->SetCallback("PostgresAdapter::Send:Sending",
                                [&](void* arg) {
                                  absl::MutexLock lock(&mu);
                                  sizes.push_back(*static_cast<size_t*>(arg));
                                });
  SyncPoint::Get()->SetCallback("PostgresAdapter::RunBatch:Start", [&](void*) {
    int batch = 0;
    {
      absl::MutexLock lock(&mu);
      batch = ++started;
      if (batch == 1) {
        first_sending.Notify();
        // Hold the first batch until every write is queued behind it.
        auto all_queued = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
          return queued >= kWrites;
        };
        mu.Await(absl::Condition(&all_queued));
      }
    }
    if (batch != 2) return;
    // The first batch is read; its connection takes the second.
    ASSERT_GE(TerminateClientBackends(), 1);
  });
  // The first write travels alone; the rest queue behind it.
  std::vector<absl::Status> outcomes =
      InsertFromThreads(one_connection.get(), "k", kWrites,
                        [&] { first_sending.WaitForNotification(); });
  SyncPoint::Get()->ClearAll();
  for (int k = 0; k < kWrites; ++k) {
    EXPECT_TRUE(outcomes[k].ok()) << k << ": " << outcomes[k];
  }
  // Two batches, none sent again.
  EXPECT_THAT(sizes,
              ::testing::ElementsAre(1u, static_cast<size_t>(kWrites - 1)));
  EXPECT_EQ(Count(), kWrites + 1);
}

// An ERROR whose SQLSTATE speaks of connections (08006 here, as dblink
// raises when its remote is down) ends only its own write: the server ran
// and committed the writes after it in the batch, so they must not be sent
// again (each would then be applied twice; here the second insert of a key
// would fail).
TEST_F(PostgresBatchTest, ConnectionErrorCodeOfOneWriteIsNotASessionEnd) {
  constexpr int kWrites = 3;
  // remote_down() vouched for, so that the Writes behind it share its
  // batch (one calling a function outside pg_catalog otherwise ends it).
  auto one_connection =
      MakeAdapter("pool_size=1&session_safe_functions=remote_down");
  ASSERT_OK(Apply(one_connection.get(), "warm", 1,
                  {Sql("INSERT INTO jobs (id) VALUES (100)")}));
  Exec(
      "CREATE OR REPLACE FUNCTION remote_down() RETURNS void LANGUAGE plpgsql "
      "AS $$BEGIN RAISE EXCEPTION 'remote down' USING ERRCODE = '08006'; "
      "END$$");
  FirstBatchHold hold(kWrites + 1);
  std::vector<absl::Status> outcomes(kWrites + 1);
  std::vector<std::thread> threads;
  // Write 0 holds the connection; 1 fails with 08006; 2 and 3 follow it in
  // the same batch.
  for (int k = 0; k <= kWrites; ++k) {
    threads.emplace_back([&, k] {
      std::vector<v1::Operation> ops;
      if (k == 1) {
        // Not a DO block: those end their batch.
        ops.push_back(Sql("SELECT remote_down()"));
      } else {
        ops.push_back(Sql("INSERT INTO jobs (id) VALUES ($1)", {Int(k)}));
      }
      outcomes[k] =
          Apply(one_connection.get(), absl::StrCat("c", k), 1, std::move(ops));
    });
    if (k == 0) hold.WaitForFirstBatch();
  }
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(hold.sizes().size(), 2u);
  EXPECT_EQ(hold.sizes()[1], static_cast<size_t>(kWrites));
  EXPECT_OK(outcomes[0]);
  EXPECT_THAT(outcomes[1], StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(outcomes[1].message(), HasSubstr("08006"));
  for (int k = 2; k <= kWrites; ++k) {
    EXPECT_TRUE(outcomes[k].ok()) << k << ": " << outcomes[k];
    EXPECT_EQ(Count(absl::StrCat("id = ", k)), 1) << k;
  }
  EXPECT_EQ(StoredFence("c1"), 0);  // Rolled back with its statement.
}

// ApplyAsync never blocks its caller: it returns once the first write is
// sent (on the caller's thread: the connection was idle), before its reply
// is read (the event loop is held as it completes the batch), and while a
// second write waits for the only connection. The loop reports both.
TEST_F(PostgresBatchTest, ApplyAsyncReturnsAtOnceAndTheLoopReports) {
  auto one_connection = MakeAdapter("pool_size=1");
  ASSERT_TRUE(one_connection->ApplyAsyncNeverBlocks());
  ASSERT_OK(Apply(one_connection.get(), "warm", 1,
                  {Sql("INSERT INTO jobs (id) VALUES (100)")}));
  absl::Notification first_read, both_returned;
  SyncPoint::Get()->SetCallback("PostgresAdapter::Complete", [&](void*) {
    if (first_read.HasBeenNotified()) return;
    first_read.Notify();
    both_returned.WaitForNotification();
  });
  struct Write {
    Operations ops;
    WriteTarget target;
    OpResults results;
    absl::Notification done;
    absl::Status status;
    std::thread::id done_thread;
  };
  Write writes[2];
  for (int k = 0; k < 2; ++k) {
    Write& w = writes[k];
    *w.ops.Add() = Sql("INSERT INTO jobs (id) VALUES ($1)", {Int(k + 1)});
    w.target = WriteTarget{k == 0 ? "first" : "queued", 1, "jobs", ""};
    one_connection->ApplyAsync(w.target, w.ops, &w.results,
                               [&w](absl::Status s) {
                                 w.status = std::move(s);
                                 w.done_thread = std::this_thread::get_id();
                                 w.done.Notify();
                               });
    // Returned: the first before its reply was read, the second while it
    // waits for the connection the first holds.
    EXPECT_FALSE(w.done.HasBeenNotified()) << k;
    if (k == 0) first_read.WaitForNotification();
  }
  both_returned.Notify();
  for (Write& w : writes) w.done.WaitForNotification();
  SyncPoint::Get()->ClearAll();
  for (int k = 0; k < 2; ++k) {
    EXPECT_TRUE(writes[k].status.ok()) << k << ": " << writes[k].status;
    ASSERT_EQ(writes[k].results.size(), 1) << k;
    EXPECT_EQ(writes[k].results[0].sql().rows_affected(), 1u) << k;
    EXPECT_EQ(Count(absl::StrCat("id = ", k + 1)), 1) << k;
  }
  EXPECT_NE(writes[0].done_thread, std::this_thread::get_id());
  EXPECT_EQ(writes[1].done_thread, writes[0].done_thread);
  EXPECT_EQ(StoredFence("queued"), 1);
}

// One caller's slow statements hold at most its share of the connections
// (max_connections_per_caller, here 1 of 2): its second Write waits in the
// queue, and another caller's Write completes on the other connection while
// the first caller's statement is still held by a table lock.
TEST_F(PostgresBatchTest, ACallersSlowStatementsLeaveTheOthersTheirShare) {
  auto two = MakeAdapter("pool_size=2&spread_after_ms=1&pool_wait_ms=60000");
  pqxx::connection locker(server_->Conninfo());
  pqxx::work lock_tx(locker);
  lock_tx.exec("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE");
  std::atomic<int> queued{0};
  SyncPoint::Get()->SetCallback("PostgresAdapter::ApplyAsync:Queued",
                                [&](void*) { ++queued; });
  struct Write {
    std::string domain;
    std::string caller;
    Operations ops;
    WriteTarget target;
    OpResults results;
    absl::Notification done;
    absl::Status status;
  };
  auto start = [&](const std::string& domain, const std::string& caller,
                   const std::string& sql) {
    auto w = std::make_unique<Write>();
    w->domain = domain;
    w->caller = caller;
    *w->ops.Add() = Sql(sql);
    w->target = WriteTarget{w->domain, 1, "jobs", ""};
    w->target.caller = w->caller;
    Write* raw = w.get();
    two->ApplyAsync(raw->target, raw->ops, &raw->results,
                    [raw](absl::Status s) {
                      raw->status = std::move(s);
                      raw->done.Notify();
                    });
    return w;
  };
  auto waiting_on_lock = [] {
    return Exec(
               "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type "
               "= 'Lock' AND query LIKE 'INSERT INTO jobs%'")[0][0]
        .as<int64_t>();
  };
  auto slow1 = start("a1", "ipv4:10.0.0.1", "INSERT INTO jobs (id) VALUES (1)");
  ASSERT_TRUE(testing::WaitFor([&] { return waiting_on_lock() == 1; }));
  // Its second Write finds the only other connection free, and waits.
  auto slow2 = start("a2", "ipv4:10.0.0.1", "INSERT INTO jobs (id) VALUES (2)");
  ASSERT_TRUE(testing::WaitFor([&] { return queued.load() >= 1; }));
  auto other = start("b", "ipv4:10.0.0.2", "SELECT 1");
  // Bounded, so that a failure shows as a failed expectation below.
  const bool served =
      other->done.WaitForNotificationWithTimeout(absl::Seconds(30));
  EXPECT_TRUE(served);
  EXPECT_EQ(waiting_on_lock(), 1);  // Never both of the first caller's.
  EXPECT_FALSE(slow2->done.HasBeenNotified());
  lock_tx.abort();
  slow1->done.WaitForNotification();
  slow2->done.WaitForNotification();
  other->done.WaitForNotification();
  SyncPoint::Get()->ClearAll();
  EXPECT_OK(other->status);
  EXPECT_OK(slow1->status);
  EXPECT_OK(slow2->status);
  EXPECT_EQ(Count(), 2);
}
#endif  // FENCEGATE_SYNC_POINTS

// With every connection busy longer than pool_wait_ms, a queued write gives
// up with UNAVAILABLE and is never sent.
TEST_F(PostgresBatchTest, QueuedWriteGivesUpAfterPoolWait) {
  auto one_connection = MakeAdapter("pool_size=1&pool_wait_ms=200");
  absl::Status slow;
  std::thread holder([&] {
    slow = Apply(
        one_connection.get(), "slow", 1,
        {Sql("SELECT pg_sleep(3)"), Sql("INSERT INTO jobs (id) VALUES (1)")});
  });
  ASSERT_TRUE(testing::WaitFor([] {
    return Exec(
               "SELECT count(*) FROM pg_stat_activity WHERE query LIKE "
               "'SELECT pg_sleep(3)%'")[0][0]
               .as<int64_t>() == 1;
  }));
  absl::Status waited = Apply(one_connection.get(), "quick", 1,
                              {Sql("INSERT INTO jobs (id) VALUES (2)")});
  holder.join();
  EXPECT_THAT(waited, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(waited.message(), HasSubstr("nothing was sent"));
  EXPECT_OK(slow);
  EXPECT_EQ(Count("id = 2"), 0);
  EXPECT_EQ(StoredFence("quick"), 0);
  EXPECT_EQ(Count("id = 1"), 1);
}

}  // namespace
}  // namespace fencegate
