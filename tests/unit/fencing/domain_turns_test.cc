// Copyright fencegate authors.
//
// DomainTurns (fencing/domain_turns.h), the one serializer of a domain's
// work: one turn per domain at a time, in the order asked for, whether by
// queued work, a blocked Wait() or TryTake(); a busy domain never starves
// another; a turn moved to another thread holds the domain until released.

#include "fencing/domain_turns.h"

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "boost/asio/post.hpp"
#include "boost/asio/thread_pool.hpp"
#include "fencegate/common/sync_point.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

// A Runner on a pool of `threads`, joined by the test.
class Pool {
 public:
  explicit Pool(size_t threads) : pool_(threads) {}
  DomainTurns::Runner runner() {
    return [this](absl::AnyInvocable<void() &&> work) {
      boost::asio::post(
          pool_, [work = std::move(work)]() mutable { std::move(work)(); });
    };
  }
  void Join() { pool_.join(); }

 private:
  boost::asio::thread_pool pool_;
};

TEST(DomainTurnsTest, OneTurnPerDomainAtATimeInTheOrderAskedFor) {
  constexpr int kDomains = 4;
  constexpr int kItems = 2000;
  Pool pool(8);
  DomainTurns turns(pool.runner());
  std::atomic<int> running[kDomains] = {};
  std::atomic<int> overlaps{0};
  std::vector<int> seen[kDomains];  // Each written only in its domain's turn.
  std::vector<std::thread> askers;
  for (int d = 0; d < kDomains; ++d) {
    askers.emplace_back([&, d] {
      const std::string domain = "domain-" + std::to_string(d);
      for (int i = 0; i < kItems; ++i) {
        turns.Queue(domain, [&, d, i](DomainTurns::Turn) {
          if (running[d].fetch_add(1) != 0) overlaps.fetch_add(1);
          seen[d].push_back(i);
          running[d].fetch_sub(1);
        });
      }
    });
  }
  for (std::thread& t : askers) t.join();
  pool.Join();
  EXPECT_EQ(overlaps.load(), 0);
  for (int d = 0; d < kDomains; ++d) {
    ASSERT_EQ(seen[d].size(), static_cast<size_t>(kItems)) << d;
    for (int i = 0; i < kItems; ++i) ASSERT_EQ(seen[d][i], i) << d;
  }
}

// With one Runner thread, a domain that always has more work queued must
// still let another domain's work run.
TEST(DomainTurnsTest, BusyDomainDoesNotStarveOthers) {
  Pool pool(1);
  DomainTurns turns(pool.runner());
  std::atomic<bool> stop{false};
  std::atomic<int> busy_items{0};
  absl::Notification other_ran;
  std::function<void()> busy = [&] {
    busy_items.fetch_add(1);
    if (!stop.load()) turns.Queue("busy", [&](DomainTurns::Turn) { busy(); });
  };
  turns.Queue("busy", [&](DomainTurns::Turn) { busy(); });
  turns.Queue("busy", [&](DomainTurns::Turn) { busy(); });  // Keeps one queued.
  turns.Queue("other", [&](DomainTurns::Turn) { other_ran.Notify(); });
  const bool ran = other_ran.WaitForNotificationWithTimeout(absl::Seconds(30));
  stop = true;
  pool.Join();
  EXPECT_TRUE(ran) << "after " << busy_items.load() << " items of the busy "
                   << "domain, the other domain's work had not run";
}

// Work that moves its Turn elsewhere keeps the domain busy after it
// returns, until the Turn is released from another thread. With one Runner
// thread, which runs work in the order it reaches it: once `another` has
// run, the holder has long returned; a next item of "d" let through by that
// return would have run before it.
TEST(DomainTurnsTest, AMovedTurnHoldsTheDomainUntilReleased) {
  Pool pool(1);
  DomainTurns turns(pool.runner());
  absl::Mutex mu;
  std::optional<DomainTurns::Turn> held;
  absl::Notification holder_returned, another_ran, next_ran;
  turns.Queue("d", [&](DomainTurns::Turn turn) {
    absl::MutexLock lock(&mu);
    held.emplace(std::move(turn));
    holder_returned.Notify();
  });
  turns.Queue("d", [&](DomainTurns::Turn) { next_ran.Notify(); });
  holder_returned.WaitForNotification();
  turns.Queue("another", [&](DomainTurns::Turn) { another_ran.Notify(); });
  another_ran.WaitForNotification();
  EXPECT_FALSE(next_ran.HasBeenNotified());
  std::thread releaser([&] {
    absl::MutexLock lock(&mu);
    held->Release();
    EXPECT_FALSE(held->held());
    held->Release();  // Idempotent.
  });
  releaser.join();
  next_ran.WaitForNotification();
  pool.Join();
}

// TryTake takes only a domain that nobody holds or waits for; work queued
// meanwhile waits for its release.
TEST(DomainTurnsTest, TryTakeTakesOnlyAFreeDomain) {
  DomainTurns turns(nullptr);  // Work runs on the thread that frees it.
  std::optional<DomainTurns::Turn> turn = turns.TryTake("d");
  ASSERT_TRUE(turn.has_value());
  EXPECT_EQ(turn->domain(), "d");
  EXPECT_FALSE(turns.TryTake("d").has_value());
  EXPECT_TRUE(turns.TryTake("other").has_value());  // Released at once.
  std::optional<DomainTurns::Turn> queued_turn;
  turns.Queue("d",
              [&](DomainTurns::Turn t) { queued_turn.emplace(std::move(t)); });
  EXPECT_FALSE(queued_turn.has_value());
  turn->Release();
  ASSERT_TRUE(queued_turn.has_value());  // Ran on this thread, at release.
  EXPECT_FALSE(turns.TryTake("d").has_value());  // Held by the queued work.
  queued_turn->Release();
  EXPECT_TRUE(turns.TryTake("d").has_value());
}

// A blocked Wait() and queued work share one line: the turn goes to
// whichever asked first.
TEST(DomainTurnsTest, WaitAndQueuedWorkTakeTurnsInTheOrderAskedFor) {
  FENCEGATE_SKIP_WITHOUT_SYNC_POINTS();
  DomainTurns turns(nullptr);
  std::optional<DomainTurns::Turn> first = turns.TryTake("d");
  ASSERT_TRUE(first.has_value());
  absl::Notification waiting;
  SyncPoint::Get()->SetCallback("DomainTurns::Wait:Behind",
                                [&](void*) { waiting.Notify(); });
  absl::Mutex mu;
  std::vector<std::string> order;
  std::thread waiter([&] {
    DomainTurns::Turn turn = turns.Wait("d");
    absl::MutexLock lock(&mu);
    order.push_back("wait");
  });
  waiting.WaitForNotification();
  turns.Queue("d", [&](DomainTurns::Turn) {
    absl::MutexLock lock(&mu);
    order.push_back("queued");
  });
  first->Release();
  waiter.join();  // Its Turn's release ran the queued work on that thread.
  SyncPoint::Get()->ClearAll();
  absl::MutexLock lock(&mu);
  EXPECT_EQ(order, (std::vector<std::string>{"wait", "queued"}));
}

TEST(DomainTurnsDeathTest, AReleasedOrForeignTurnIsFatal) {
  DomainTurns turns(nullptr);
  DomainTurns other(nullptr);
  std::optional<DomainTurns::Turn> turn = turns.TryTake("d");
  ASSERT_TRUE(turn.has_value());
  turns.CheckHeld(*turn);  // Held, and this one's: fine.
  EXPECT_DEATH(other.CheckHeld(*turn), "another's");
  turn->Release();
  EXPECT_DEATH(turns.CheckHeld(*turn), "released");
}

TEST(DomainTurnsDeathTest, DestroyingItWithATurnHeldIsFatal) {
  EXPECT_DEATH(
      {
        auto* turns = new DomainTurns(nullptr);
        std::optional<DomainTurns::Turn> turn = turns->TryTake("d");
        delete turns;
      },
      "still held");
}

}  // namespace
}  // namespace fencegate
