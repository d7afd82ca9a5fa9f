// Copyright fencegate authors.
//
// DomainExecutor: one item per domain at a time, in posting order, and a
// busy domain never starves another.

#include "gateway/domain_executor.h"

#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace fencegate {
namespace {

TEST(DomainExecutorTest, OneItemPerDomainAtATimeInPostingOrder) {
  constexpr int kDomains = 4;
  constexpr int kItems = 2000;
  DomainExecutor executor(8);
  std::atomic<int> running[kDomains] = {};
  std::atomic<int> overlaps{0};
  std::vector<int> seen[kDomains];  // Each written only by its domain's items.
  std::vector<std::thread> posters;
  for (int d = 0; d < kDomains; ++d) {
    posters.emplace_back([&, d] {
      const std::string domain = "domain-" + std::to_string(d);
      for (int i = 0; i < kItems; ++i) {
        executor.Post(domain, [&, d, i] {
          if (running[d].fetch_add(1) != 0) overlaps.fetch_add(1);
          seen[d].push_back(i);
          running[d].fetch_sub(1);
        });
      }
    });
  }
  for (std::thread& t : posters) t.join();
  executor.Join();
  EXPECT_EQ(overlaps.load(), 0);
  for (int d = 0; d < kDomains; ++d) {
    ASSERT_EQ(seen[d].size(), static_cast<size_t>(kItems)) << d;
    for (int i = 0; i < kItems; ++i) ASSERT_EQ(seen[d][i], i) << d;
  }
}

// With one pool thread, a domain that always has more work queued must
// still let another domain's item run.
TEST(DomainExecutorTest, BusyDomainDoesNotStarveOthers) {
  DomainExecutor executor(1);
  std::atomic<bool> stop{false};
  std::atomic<int> busy_items{0};
  absl::Notification other_ran;
  std::function<void()> busy = [&] {
    busy_items.fetch_add(1);
    if (!stop.load()) executor.Post("busy", [&] { busy(); });
  };
  executor.Post("busy", [&] { busy(); });
  executor.Post("busy", [&] { busy(); });  // Keeps the lane's queue non-empty.
  executor.Post("other", [&] { other_ran.Notify(); });
  const bool ran = other_ran.WaitForNotificationWithTimeout(absl::Seconds(30));
  stop = true;
  executor.Join();
  EXPECT_TRUE(ran) << "after " << busy_items.load() << " items of the busy "
                   << "domain, the other domain's item had not run";
}

// A domain whose work holds its Lane stays busy after the work returns,
// until the Lane is released from another thread. With one pool thread,
// which runs items in the order they reach it: once `other` has run, the
// holder has returned; a next item of "d" released by that return would
// have reached the pool before `another`, posted after that, and so would
// have run by the time `another` has.
TEST(DomainExecutorTest, HeldLaneKeepsTheDomainBusyUntilReleased) {
  DomainExecutor executor(1);
  absl::Mutex mu;
  std::optional<DomainExecutor::Lane> held;
  absl::Notification holder_returned, other_ran, another_ran, next_ran;
  executor.PostHeld("d", [&](DomainExecutor::Lane lane) {
    absl::MutexLock lock(&mu);
    held.emplace(std::move(lane));
    holder_returned.Notify();
  });
  executor.Post("d", [&] { next_ran.Notify(); });
  holder_returned.WaitForNotification();
  executor.Post("other", [&] { other_ran.Notify(); });
  other_ran.WaitForNotification();
  executor.Post("another", [&] { another_ran.Notify(); });
  another_ran.WaitForNotification();
  EXPECT_FALSE(next_ran.HasBeenNotified());
  std::thread releaser([&] {
    absl::MutexLock lock(&mu);
    held->Release();
  });
  releaser.join();
  next_ran.WaitForNotification();
  executor.Join();
}

// TryAcquire takes an idle domain's turn for the caller; work posted for
// the domain meanwhile waits for its release, and a busy domain cannot be
// acquired. PostWithLane hands the turn to the pool without letting go.
TEST(DomainExecutorTest, TryAcquireTakesOnlyAnIdleDomain) {
  DomainExecutor executor(1);
  std::optional<DomainExecutor::Lane> lane = executor.TryAcquire("d");
  ASSERT_TRUE(lane.has_value());
  EXPECT_FALSE(executor.TryAcquire("d").has_value());
  EXPECT_TRUE(executor.TryAcquire("other").has_value());  // Released at once.
  absl::Notification posted_ran, barrier_ran, handed_ran, after_ran;
  executor.Post("d", [&] { posted_ran.Notify(); });
  // One pool thread runs items in the order they reach it: had the posted
  // item been let through, it would run before `barrier`.
  executor.Post("barrier", [&] { barrier_ran.Notify(); });
  barrier_ran.WaitForNotification();
  EXPECT_FALSE(posted_ran.HasBeenNotified());
  absl::Mutex mu;
  std::optional<DomainExecutor::Lane> handed;
  executor.PostWithLane(*std::move(lane), [&](DomainExecutor::Lane l) {
    absl::MutexLock lock(&mu);
    handed.emplace(std::move(l));
    handed_ran.Notify();
  });
  handed_ran.WaitForNotification();
  executor.Post("after", [&] { after_ran.Notify(); });
  after_ran.WaitForNotification();
  EXPECT_FALSE(posted_ran.HasBeenNotified());  // Still "d"'s turn.
  {
    absl::MutexLock lock(&mu);
    handed->Release();
  }
  posted_ran.WaitForNotification();
  executor.Join();  // The posted item has returned: "d" is idle again.
  EXPECT_TRUE(executor.TryAcquire("d").has_value());
}

}  // namespace
}  // namespace fencegate
