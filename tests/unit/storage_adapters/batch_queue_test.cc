// Copyright fencegate authors.
//
// BatchQueue's rules (batch_queue.h), with a fake Driver that records what
// it is asked to do: no PostgreSQL, no threads of the queue's own.

#include "storage_adapters/postgres/batch_queue.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

namespace fencegate::postgres {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class FakeDriver : public BatchQueue::Driver {
 public:
  struct Sent {
    BatchQueue::Connection* conn;
    Batch batch;
    std::thread::id thread;
  };

  void Send(BatchQueue::Connection* conn, Batch batch) override {
    absl::MutexLock lock(&mu_);
    sent_.push_back({conn, std::move(batch), std::this_thread::get_id()});
  }
  void Open() override {
    absl::MutexLock lock(&mu_);
    ++opens_;
  }
  void TickAt(absl::Time when) override {
    absl::MutexLock lock(&mu_);
    ticks_.push_back(when);
  }

  // The batches sent so far, taken.
  std::vector<Sent> TakeSent() {
    absl::MutexLock lock(&mu_);
    return std::exchange(sent_, {});
  }
  int opens() {
    absl::MutexLock lock(&mu_);
    return opens_;
  }
  std::vector<absl::Time> ticks() {
    absl::MutexLock lock(&mu_);
    return ticks_;
  }

 private:
  absl::Mutex mu_;
  std::vector<Sent> sent_ ABSL_GUARDED_BY(mu_);
  int opens_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<absl::Time> ticks_ ABSL_GUARDED_BY(mu_);
};

// A Write's outcome, once its callback ran.
struct Outcome {
  std::optional<absl::Status> status;
};

std::unique_ptr<QueuedWrite> MakeWrite(int id, Outcome* out,
                                       absl::Time at = absl::Now(),
                                       bool dirty = false,
                                       std::string caller = "") {
  auto w = std::make_unique<QueuedWrite>();
  w->caller = std::move(caller);
  w->queued_at = at;
  w->dirty = dirty;
  w->held = static_cast<uint64_t>(id);  // Names the write in batches.
  w->done = [out](absl::Status s) { out->status = std::move(s); };
  return w;
}

std::vector<int> Ids(const Batch& batch) {
  std::vector<int> ids;
  for (const std::unique_ptr<QueuedWrite>& w : batch) {
    ids.push_back(static_cast<int>(w->held));
  }
  return ids;
}

BatchQueue::Options Opts(int connections,
                         absl::Duration spread_after = absl::Hours(1),
                         size_t max_batch = 16) {
  BatchQueue::Options o;
  o.connections = connections;
  o.wait = absl::Hours(2);
  o.spread_after = spread_after;
  o.max_batch = max_batch;
  o.label = "postgres test";
  return o;
}

class BatchQueueTest : public ::testing::Test {
 protected:
  // Opens one connection for `queue` and returns it, busy with write 0.
  BatchQueue::Connection* BusyConnection(BatchQueue& queue) {
    const int opens = driver_.opens();
    queue.Add(MakeWrite(0, &first_));
    EXPECT_EQ(driver_.opens(), opens + 1);
    EXPECT_TRUE(driver_.TakeSent().empty());
    queue.Opened(std::make_unique<BatchQueue::Connection>());
    std::vector<FakeDriver::Sent> sent = driver_.TakeSent();
    EXPECT_EQ(sent.size(), 1u);
    if (sent.empty()) return nullptr;
    EXPECT_THAT(Ids(sent[0].batch), ElementsAre(0));
    return sent[0].conn;
  }

  FakeDriver driver_;
  Outcome first_;
};

// A Write that finds the queue empty and a connection idle is sent by the
// thread that adds it, alone.
TEST_F(BatchQueueTest, LightLoadSendsOnTheAddingThread) {
  BatchQueue queue(Opts(2), &driver_);
  BatchQueue::Connection* conn = BusyConnection(queue);
  queue.Done(conn, /*usable=*/true);
  EXPECT_EQ(queue.counts().idle, 1u);
  Outcome o;
  queue.Add(MakeWrite(1, &o));
  std::vector<FakeDriver::Sent> sent = driver_.TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].conn, conn);
  EXPECT_EQ(sent[0].thread, std::this_thread::get_id());
  EXPECT_THAT(Ids(sent[0].batch), ElementsAre(1));
  EXPECT_EQ(sent[0].batch[0]->attempts, 1);
  EXPECT_EQ(driver_.opens(), 1);  // None more.
  queue.Done(conn, true);
  queue.Stop(absl::CancelledError("stop"));
  queue.CloseIdle();
}

// A Write that finds one connection busy and another idle waits for the
// busy one's next batch: the light path is for a light load only.
TEST_F(BatchQueueTest, AWriteBehindABusyConnectionWaitsThoughOneIsIdle) {
  BatchQueue queue(Opts(2, absl::Hours(1), /*max_batch=*/1), &driver_);
  BatchQueue::Connection* conn = BusyConnection(queue);
  Outcome o[3];
  queue.Add(MakeWrite(1, &o[0]));
  queue.Add(MakeWrite(2, &o[1]));  // More than `conn` takes: another opens.
  ASSERT_EQ(driver_.opens(), 2);
  queue.Opened(std::make_unique<BatchQueue::Connection>());
  std::vector<FakeDriver::Sent> sent = driver_.TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  BatchQueue::Connection* second = sent[0].conn;
  queue.Done(second, true);  // Takes write 2.
  sent = driver_.TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_THAT(Ids(sent[0].batch), ElementsAre(2));
  queue.Done(second, true);  // Idle now, with `conn` still busy.
  ASSERT_EQ(queue.counts().idle, 1u);
  queue.Add(MakeWrite(3, &o[2]));
  EXPECT_TRUE(driver_.TakeSent().empty());
  queue.Done(conn, true);
  sent = driver_.TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].conn, conn);
  EXPECT_THAT(Ids(sent[0].batch), ElementsAre(3));
  queue.Done(conn, true);
  queue.Stop(absl::CancelledError("stop"));
  queue.CloseIdle();
}

// Writes queued while the only busy connection carries a batch wait for
// its next batch (in order), although three more could be opened.
TEST_F(BatchQueueTest, QueuedWritesWaitForTheBusyConnection) {
  BatchQueue queue(Opts(4), &driver_);
  BatchQueue::Connection* conn = BusyConnection(queue);
  Outcome o[5];
  for (int i = 1; i <= 5; ++i) queue.Add(MakeWrite(i, &o[i - 1]));
  EXPECT_TRUE(driver_.TakeSent().empty());
  EXPECT_EQ(driver_.opens(), 1);
  queue.Done(conn, true);
  std::vector<FakeDriver::Sent> sent = driver_.TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].conn, conn);
  EXPECT_THAT(Ids(sent[0].batch), ElementsAre(1, 2, 3, 4, 5));
  queue.Done(conn, true);
  queue.Stop(absl::CancelledError("stop"));
  queue.CloseIdle();
}

// More Writes queued than the busy connection's next batch takes: another
// connection is opened for them.
TEST_F(BatchQueueTest, MoreThanABatchOpensAnotherConnection) {
  BatchQueue queue(Opts(4, absl::Hours(1), /*max_batch=*/2), &driver_);
  BatchQueue::Connection* conn = BusyConnection(queue);
  Outcome o[3];
  queue.Add(MakeWrite(1, &o[0]));
  queue.Add(MakeWrite(2, &o[1]));
  EXPECT_EQ(driver_.opens(), 1);
  queue.Add(MakeWrite(3, &o[2]));
  EXPECT_EQ(driver_.opens(), 2);
  queue.Opened(std::make_unique<BatchQueue::Connection>());
  std::vector<FakeDriver::Sent> sent = driver_.TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  BatchQueue::Connection* second = sent[0].conn;
  EXPECT_NE(second, conn);
  EXPECT_THAT(Ids(sent[0].batch), ElementsAre(1, 2));  // max_batch.
  queue.Done(conn, true);
  sent = driver_.TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].conn, conn);
  EXPECT_THAT(Ids(sent[0].batch), ElementsAre(3));
  queue.Done(conn, true);
  queue.Done(second, true);
  queue.Stop(absl::CancelledError("stop"));
  queue.CloseIdle();
}

// With spread_after zero, a queued Write never waits for a busy or an
// opening connection: each opens one of its own, up to `connections`.
TEST_F(BatchQueueTest, ZeroSpreadAfterOpensAConnectionPerWrite) {
  BatchQueue queue(Opts(3, absl::ZeroDuration()), &driver_);
  Outcome o[4];
  for (int i = 0; i < 4; ++i) queue.Add(MakeWrite(i, &o[i]));
  EXPECT_EQ(driver_.opens(), 3);
  queue.Abandon(absl::CancelledError("stop"));
  for (int i = 0; i < 3; ++i) queue.OpenFailed(absl::UnavailableError("x"));
}

// The oldest queued Write waited spread_after: the tick opens another
// connection (not before), and the tick was asked for then.
TEST_F(BatchQueueTest, SpreadsAfterSpreadAfter) {
  const absl::Duration spread = absl::Milliseconds(10);
  BatchQueue queue(Opts(2, spread), &driver_);
  BatchQueue::Connection* conn = BusyConnection(queue);
  const absl::Time t0 = absl::Now();
  Outcome o;
  queue.Add(MakeWrite(1, &o, t0));
  EXPECT_EQ(driver_.opens(), 1);
  ASSERT_FALSE(driver_.ticks().empty());
  EXPECT_EQ(driver_.ticks().back(), t0 + spread);
  queue.Tick(t0 + spread / 2);
  EXPECT_EQ(driver_.opens(), 1);
  queue.Tick(t0 + spread);
  EXPECT_EQ(driver_.opens(), 2);
  queue.Opened(std::make_unique<BatchQueue::Connection>());
  std::vector<FakeDriver::Sent> sent = driver_.TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_NE(sent[0].conn, conn);
  EXPECT_THAT(Ids(sent[0].batch), ElementsAre(1));
  queue.Done(sent[0].conn, true);
  queue.Done(conn, true);
  queue.Stop(absl::CancelledError("stop"));
  queue.CloseIdle();
}

// A Write queued for `wait` fails UNAVAILABLE, never sent.
TEST_F(BatchQueueTest, WriteQueuedTooLongFails) {
  BatchQueue::Options opts = Opts(1);
  opts.wait = absl::Milliseconds(100);
  std::vector<absl::Duration> waits;
  opts.observe_wait = [&](absl::Duration d) { waits.push_back(d); };
  BatchQueue queue(opts, &driver_);
  BatchQueue::Connection* conn = BusyConnection(queue);
  const absl::Time t0 = absl::Now();
  Outcome o;
  queue.Add(MakeWrite(1, &o, t0));
  queue.Tick(t0 + absl::Milliseconds(99));
  EXPECT_FALSE(o.status.has_value());
  queue.Tick(t0 + absl::Milliseconds(100));
  ASSERT_TRUE(o.status.has_value());
  EXPECT_EQ(o.status->code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(o.status->message(), HasSubstr("postgres test: waited 100ms"));
  EXPECT_THAT(o.status->message(), HasSubstr("nothing was sent"));
  EXPECT_EQ(waits.back(), absl::Milliseconds(100));
  queue.Done(conn, true);
  EXPECT_TRUE(driver_.TakeSent().empty());
  queue.Stop(absl::CancelledError("stop"));
  queue.CloseIdle();
}

// A dirty Write ends its batch.
TEST_F(BatchQueueTest, DirtyWriteEndsItsBatch) {
  BatchQueue queue(Opts(1), &driver_);
  BatchQueue::Connection* conn = BusyConnection(queue);
  Outcome o[3];
  const absl::Time now = absl::Now();
  queue.Add(MakeWrite(1, &o[0], now));
  queue.Add(MakeWrite(2, &o[1], now, /*dirty=*/true));
  queue.Add(MakeWrite(3, &o[2], now));
  queue.Done(conn, true);
  std::vector<FakeDriver::Sent> sent = driver_.TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_THAT(Ids(sent[0].batch), ElementsAre(1, 2));
  queue.Done(conn, true);
  sent = driver_.TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_THAT(Ids(sent[0].batch), ElementsAre(3));
  queue.Done(conn, true);
  queue.Stop(absl::CancelledError("stop"));
  queue.CloseIdle();
}

// A connection that cannot be opened fails the queued Writes if nothing
// else will take them; while another connection is busy, they wait for it.
TEST_F(BatchQueueTest, OpenFailureFailsTheQueueOnlyIfNothingElseCarries) {
  BatchQueue queue(Opts(2, absl::Milliseconds(10)), &driver_);
  Outcome lonely;
  queue.Add(MakeWrite(0, &lonely));
  ASSERT_EQ(driver_.opens(), 1);
  queue.OpenFailed(absl::UnavailableError("postgres test: refused"));
  ASSERT_TRUE(lonely.status.has_value());
  EXPECT_EQ(*lonely.status, absl::UnavailableError("postgres test: refused"));

  BatchQueue::Connection* conn = BusyConnection(queue);
  const absl::Time t0 = absl::Now();
  Outcome o;
  queue.Add(MakeWrite(1, &o, t0));
  queue.Tick(t0 + absl::Milliseconds(10));  // Spreads: opens another.
  ASSERT_EQ(driver_.opens(), 3);
  queue.OpenFailed(absl::UnavailableError("refused"));
  EXPECT_FALSE(o.status.has_value());  // Waits for `conn`.
  queue.Done(conn, true);
  std::vector<FakeDriver::Sent> sent = driver_.TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_THAT(Ids(sent[0].batch), ElementsAre(1));
  queue.Done(conn, true);
  queue.Stop(absl::CancelledError("stop"));
  queue.CloseIdle();
}

// A batch's retries go to the front of the queue, ahead of Writes queued
// meanwhile, and an unusable connection is dropped.
TEST_F(BatchQueueTest, RetriesGoFirst) {
  BatchQueue queue(Opts(1), &driver_);
  BatchQueue::Connection* conn = BusyConnection(queue);
  Outcome o;
  queue.Add(MakeWrite(1, &o));
  Batch retries;
  retries.push_back(MakeWrite(7, &first_));
  retries.back()->attempts = 1;
  queue.Done(conn, /*usable=*/false, std::move(retries));
  EXPECT_EQ(queue.counts().busy + queue.counts().idle, 0u);
  EXPECT_EQ(driver_.opens(), 2);
  queue.Opened(std::make_unique<BatchQueue::Connection>());
  std::vector<FakeDriver::Sent> sent = driver_.TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_THAT(Ids(sent[0].batch), ElementsAre(7, 1));
  EXPECT_EQ(sent[0].batch[0]->attempts, 2);
  EXPECT_EQ(sent[0].batch[1]->attempts, 1);
  queue.Done(sent[0].conn, true);
  queue.Stop(absl::CancelledError("stop"));
  queue.CloseIdle();
}

// After Abandon(), queued Writes fail, later ones at once, and retries are
// not queued again.
TEST_F(BatchQueueTest, AbandonFailsQueuedLaterAndRetries) {
  BatchQueue queue(Opts(1), &driver_);
  BatchQueue::Connection* conn = BusyConnection(queue);
  Outcome queued, later, retried;
  queue.Add(MakeWrite(1, &queued));
  queue.Abandon(absl::UnavailableError("shutting down"));
  ASSERT_TRUE(queued.status.has_value());
  EXPECT_EQ(queued.status->code(), absl::StatusCode::kUnavailable);
  queue.Add(MakeWrite(2, &later));
  ASSERT_TRUE(later.status.has_value());
  EXPECT_EQ(*later.status, absl::UnavailableError("shutting down"));
  Batch retries;
  retries.push_back(MakeWrite(3, &retried));
  queue.Done(conn, true, std::move(retries));
  ASSERT_TRUE(retried.status.has_value());
  EXPECT_EQ(retried.status->code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(driver_.TakeSent().empty());
  queue.Stop(absl::CancelledError("stop"));
  queue.CloseIdle();
}

// A Write that calls code outside pg_catalog ends its batch, as a dirty
// one does: what is queued behind it waits for the next batch.
TEST_F(BatchQueueTest, AnOpaqueWriteEndsItsBatch) {
  BatchQueue queue(Opts(1), &driver_);
  BatchQueue::Connection* conn = BusyConnection(queue);
  Outcome o[3];
  queue.Add(MakeWrite(1, &o[0]));
  auto opaque = MakeWrite(2, &o[1]);
  opaque->opaque = true;
  queue.Add(std::move(opaque));
  queue.Add(MakeWrite(3, &o[2]));
  queue.Done(conn, true);
  std::vector<FakeDriver::Sent> sent = driver_.TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_THAT(Ids(sent[0].batch), ElementsAre(1, 2));
  queue.Done(conn, true);
  sent = driver_.TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_THAT(Ids(sent[0].batch), ElementsAre(3));
  queue.Done(conn, true);
  queue.Stop(absl::CancelledError("stop"));
  queue.CloseIdle();
}

// A caller at its share (per_caller connections carrying its Writes)
// waits: a free connection takes the Writes of the others, skipping its
// (which keep their order), and takes its again once one of its batches
// ends.
TEST_F(BatchQueueTest, ACallerAtItsShareWaitsAndTheOthersGoOn) {
  BatchQueue::Options options = Opts(2, absl::ZeroDuration());
  options.per_caller = 1;
  BatchQueue queue(options, &driver_);
  Outcome o[4];
  queue.Add(MakeWrite(1, &o[0], absl::Now(), false, "a"));
  ASSERT_EQ(driver_.opens(), 1);
  queue.Opened(std::make_unique<BatchQueue::Connection>());
  std::vector<FakeDriver::Sent> sent = driver_.TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  BatchQueue::Connection* first = sent[0].conn;
  // "a" is at its share: its next Writes open nothing.
  queue.Add(MakeWrite(2, &o[1], absl::Now(), false, "a"));
  queue.Add(MakeWrite(3, &o[2], absl::Now(), false, "a"));
  EXPECT_EQ(driver_.opens(), 1);
  queue.Add(MakeWrite(4, &o[3], absl::Now(), false, "b"));
  ASSERT_EQ(driver_.opens(), 2);
  queue.Opened(std::make_unique<BatchQueue::Connection>());
  sent = driver_.TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  BatchQueue::Connection* second = sent[0].conn;
  EXPECT_THAT(Ids(sent[0].batch), ElementsAre(4));
  queue.Done(second, true);  // Goes idle: only "a"'s Writes are queued.
  EXPECT_TRUE(driver_.TakeSent().empty());
  EXPECT_EQ(queue.counts().idle, 1u);
  queue.Done(first, true);  // "a" is below its share again.
  sent = driver_.TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].conn, first);
  EXPECT_THAT(Ids(sent[0].batch), ElementsAre(2, 3));
  queue.Done(first, true);
  queue.Stop(absl::CancelledError("stop"));
  queue.CloseIdle();
}

// A caller's Writes that wait past `wait` at their share fail UNAVAILABLE
// naming the share, and the tick asks no spread for them.
TEST_F(BatchQueueTest, AWriteWaitingAtItsShareFailsNamingIt) {
  BatchQueue::Options options = Opts(2, absl::Milliseconds(5));
  options.per_caller = 1;
  options.wait = absl::Seconds(1);
  BatchQueue queue(options, &driver_);
  const absl::Time t0 = absl::Now();
  Outcome o[2];
  queue.Add(MakeWrite(1, &o[0], t0, false, "a"));
  queue.Opened(std::make_unique<BatchQueue::Connection>());
  std::vector<FakeDriver::Sent> sent = driver_.TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  queue.Add(MakeWrite(2, &o[1], t0, false, "a"));
  queue.Tick(t0 + absl::Milliseconds(10));  // No spread: "a" is at share.
  EXPECT_EQ(driver_.opens(), 1);
  queue.Tick(t0 + absl::Seconds(2));
  ASSERT_TRUE(o[1].status.has_value());
  EXPECT_EQ(o[1].status->code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(o[1].status->message(), HasSubstr("max_connections_per_caller"));
  queue.Done(sent[0].conn, true);
  queue.Stop(absl::CancelledError("stop"));
  queue.CloseIdle();
}

// A fair share: alone, a caller takes all but one connection; the caller
// that comes next takes that one at once, while the first one's next Write
// waits for one of its batches to end.
TEST_F(BatchQueueTest, ACallerAloneLeavesAConnectionForTheNext) {
  BatchQueue::Options options = Opts(3, absl::ZeroDuration(), 1);
  options.fair_share = true;
  BatchQueue queue(options, &driver_);
  Outcome o[4];
  for (int i = 0; i < 3; ++i) {
    queue.Add(MakeWrite(i + 1, &o[i], absl::Now(), false, "a"));
  }
  ASSERT_EQ(driver_.opens(), 3);
  for (int i = 0; i < 3; ++i) {
    queue.Opened(std::make_unique<BatchQueue::Connection>());
  }
  // Its share is 3 - 1: the third connection stays idle.
  std::vector<FakeDriver::Sent> sent = driver_.TakeSent();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_THAT(Ids(sent[0].batch), ElementsAre(1));
  EXPECT_THAT(Ids(sent[1].batch), ElementsAre(2));
  EXPECT_EQ(queue.counts().idle, 1u);
  queue.Add(MakeWrite(4, &o[3], absl::Now(), false, "b"));
  std::vector<FakeDriver::Sent> third = driver_.TakeSent();
  ASSERT_EQ(third.size(), 1u);
  EXPECT_THAT(Ids(third[0].batch), ElementsAre(4));  // Not "a"'s third.
  EXPECT_FALSE(o[2].status.has_value());
  queue.Done(sent[0].conn, true);  // "a" below its share: its third goes.
  std::vector<FakeDriver::Sent> next = driver_.TakeSent();
  ASSERT_EQ(next.size(), 1u);
  EXPECT_THAT(Ids(next[0].batch), ElementsAre(3));
  queue.Done(next[0].conn, true);
  queue.Done(sent[1].conn, true);
  queue.Done(third[0].conn, true);
  queue.Stop(absl::CancelledError("stop"));
  queue.CloseIdle();
}

// A batch that ends frees every caller it carried: each queued Write that
// becomes takeable goes out at once, on this connection or an idle one.
TEST_F(BatchQueueTest, ABatchThatEndsFreesEveryCallerItCarried) {
  BatchQueue::Options options = Opts(2, absl::ZeroDuration());
  options.per_caller = 1;
  BatchQueue queue(options, &driver_);
  Outcome o[4];
  queue.Add(MakeWrite(1, &o[0], absl::Now(), false, "x"));
  queue.Add(MakeWrite(2, &o[1], absl::Now(), false, "y"));
  ASSERT_EQ(driver_.opens(), 2);
  queue.Opened(std::make_unique<BatchQueue::Connection>());  // Takes both.
  queue.Opened(std::make_unique<BatchQueue::Connection>());  // Idle.
  std::vector<FakeDriver::Sent> sent = driver_.TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_THAT(Ids(sent[0].batch), ElementsAre(1, 2));
  auto opaque = MakeWrite(3, &o[2], absl::Now(), false, "x");
  opaque->opaque = true;  // Ends its batch.
  queue.Add(std::move(opaque));
  queue.Add(MakeWrite(4, &o[3], absl::Now(), false, "y"));
  EXPECT_TRUE(driver_.TakeSent().empty());  // Both callers at their share.
  queue.Done(sent[0].conn, true);
  std::vector<FakeDriver::Sent> next = driver_.TakeSent();
  ASSERT_EQ(next.size(), 2u);
  EXPECT_EQ(next[0].conn, sent[0].conn);
  EXPECT_THAT(Ids(next[0].batch), ElementsAre(3));
  EXPECT_NE(next[1].conn, sent[0].conn);
  EXPECT_THAT(Ids(next[1].batch), ElementsAre(4));
  queue.Done(next[0].conn, true);
  queue.Done(next[1].conn, true);
  queue.Stop(absl::CancelledError("stop"));
  queue.CloseIdle();
}

}  // namespace
}  // namespace fencegate::postgres
