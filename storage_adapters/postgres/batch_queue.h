// Copyright fencegate authors.
//
// BatchQueue: which Writes travel together, on which connection, and when;
// knows nothing of PostgreSQL (a Driver sends, opens and keeps time), so
// that its rules are tested with a fake connection.
//
// Rules:
//   - A Write that finds the queue empty and every open connection idle
//     is sent at once, by the thread that added it (Driver::Send on the
//     caller's thread: no hand-off when the load is light). One that finds
//     a connection busy is queued for its next batch (below), even if
//     another is idle: sending each Write the moment it arrives, on
//     whichever connection is free, would cost the database a round trip
//     per Write under load.
//   - Otherwise it waits in the queue, oldest first. A connection that
//     completes its batch (Done) takes the oldest queued Writes as its next
//     batch, up to max_batch of them, and a dirty Write (one whose session
//     is reset after it) or an opaque one (calling code outside
//     pg_catalog, which may change the session) ends its batch.
//   - Queued Writes wait for a busy connection's next batch rather than
//     open a new connection, unless more are queued than the busy and
//     opening connections will take (max_batch each) or the oldest has
//     waited spread_after (then an idle connection takes them, or one is
//     opened, if there are fewer than `connections`): fewer connections
//     carrying bigger batches cost the database less per Write. With
//     spread_after zero, a queued Write never waits for a busy or opening
//     connection while another can be opened.
//   - A caller (WriteTarget::caller) has Writes on at most its share of the
//     connections at once: per_caller if set, else with fair_share the
//     connections divided by the callers with Writes queued or in flight
//     (rounded up), and never all of them while there are two or more
//     (alone, a caller leaves one for whoever comes next). A batch skips
//     the queued Writes of a caller at its share (they keep their order and
//     wait for one of its batches to end), so that one caller's slow
//     statements cannot take every connection from the others. A batch
//     that ends frees its callers' Writes for the idle connections at once.
//     Writes without a caller share nothing.
//   - A Write queued for `wait` fails UNAVAILABLE, never sent (checked by
//     Tick, which the Driver runs no later than asked with TickAt).
//   - A connection that cannot be opened fails the queued Writes with its
//     error if no other connection is open or opening; otherwise they wait
//     for those.
//   - A batch's retries (Writes that nothing committed, on their first
//     attempt) go back to the front of the queue.
//   - After Abandon(), queued and later Writes fail at once.
//
// Thread safety: safe for concurrent use. The Driver is called without the
// queue's lock held, and each Write's callback too.

#ifndef STORAGE_ADAPTERS_POSTGRES_BATCH_QUEUE_H_
#define STORAGE_ADAPTERS_POSTGRES_BATCH_QUEUE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "storage_adapters/storage_adapter.h"

namespace fencegate::postgres {

// A Write waiting for, or travelling in, a batch; owned by the queue, then
// by its batch, until its callback has run.
struct QueuedWrite {
  const WriteTarget* target = nullptr;
  const Operations* ops = nullptr;
  OpResults* results = nullptr;
  StorageAdapter::ApplyCallback done;
  absl::Time queued_at;  // When it last entered the queue.
  int attempts = 0;      // Batches it was taken into.
  bool dirty = false;    // Its session is reset after it: ends a batch.
  // It calls code outside pg_catalog that may change the session: ends a
  // batch, so that the session is checked before another Write runs.
  bool opaque = false;
  absl::Status status;     // Its outcome, set by whoever sent it.
  bool retryable = false;  // Nothing was committed: safe to send again.
  bool stale = false;      // The database holds a higher token.
  uint64_t held = 0;       // The database's token, when stale.
  // Its (token, seq) was the database's already: applied by an earlier
  // attempt, not again.
  bool replayed = false;
  uint64_t later_seq = 0;  // The database's seq, when out of order.
  // Who sent it (WriteTarget::caller); empty: nobody in particular.
  std::string caller;
};
using Batch = std::vector<std::unique_ptr<QueuedWrite>>;

class BatchQueue {
 public:
  // A connection, as the queue sees it: the Driver's own type derives.
  class Connection {
   public:
    virtual ~Connection() = default;
  };

  // What the queue asks of its owner. Never called with the queue's lock
  // held; may be called on any thread that calls the queue.
  class Driver {
   public:
    virtual ~Driver() = default;
    // Sends `batch` on `conn`, which is the caller's until it calls Done()
    // for it. Must not block.
    virtual void Send(Connection* conn, Batch batch) = 0;
    // Starts opening a connection; Opened() or OpenFailed() follows, from
    // any thread. Must not block.
    virtual void Open() = 0;
    // Tick() is wanted at `when` (a later call may ask for an earlier
    // time). Must not block.
    virtual void TickAt(absl::Time when) = 0;
  };

  struct Options {
    int connections = 1;                     // At most open.
    absl::Duration wait = absl::Seconds(5);  // In the queue, at most.
    absl::Duration spread_after = absl::ZeroDuration();
    size_t max_batch = 16;
    // Connections that one caller's Writes may occupy at once; 0: see
    // fair_share.
    size_t per_caller = 0;
    // With per_caller 0: each caller's share is the connections divided by
    // the callers with Writes queued or in flight, at most connections - 1.
    // Otherwise (and per_caller 0) callers share nothing.
    bool fair_share = false;
    // Names the connections' server in errors ("postgres <uri>").
    std::string label;
    // If set, told how long each Write waited in the queue: when a batch
    // takes it, or when it gives up. Called with the queue's lock held.
    std::function<void(absl::Duration)> observe_wait;
  };

  BatchQueue(Options options, Driver* driver);
  BatchQueue(const BatchQueue&) = delete;
  BatchQueue& operator=(const BatchQueue&) = delete;
  // Destroys the connections; call Stop() first.
  ~BatchQueue();

  // Takes a Write: sends it at once on an idle connection, or queues it.
  void Add(std::unique_ptr<QueuedWrite> w);

  // `conn`'s batch is over. If `usable`, it takes the next batch (Send, on
  // this thread) or goes idle; otherwise it is destroyed. `retries` go to
  // the front of the queue first.
  void Done(Connection* conn, bool usable, Batch retries = {});

  // A connection Open() asked for is ready: it takes the queued Writes or
  // goes idle.
  void Opened(std::unique_ptr<Connection> conn);
  // It could not be opened (`error` says why).
  void OpenFailed(const absl::Status& error);

  // Fails Writes queued for `wait`; spreads the queue to another connection
  // if its oldest Write waited spread_after; asks for the next tick.
  void Tick(absl::Time now);

  // Fails the queued Writes with `error`, and every later one at once.
  void Abandon(const absl::Status& error);

  // Waits until no connection carries a batch and none is opening (the
  // queue then is empty, or holds Writes that no connection could take),
  // then fails what is left with `error`. Later Writes fail at once.
  void Stop(const absl::Status& error);

  // Destroys the idle connections (after Stop(): all of them).
  void CloseIdle();
  // Destroys the idle connections for which `close` is true (called with
  // the queue's lock held: it must not call the queue); returns how many.
  size_t CloseIdleIf(absl::FunctionRef<bool(const Connection&)> close);

  // Connections open now.
  struct Counts {
    size_t idle = 0;
    size_t busy = 0;
  };
  Counts counts() const;

 private:
  // Takes up to max_batch Writes for `conn` from the front of the queue,
  // skipping those of callers at their share (a dirty one ends it),
  // counting an attempt for each; counts `conn` against the callers taken.
  Batch TakeLocked(Connection* conn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `conn`'s batch is over: it no longer counts against its callers.
  void ReleaseCallersLocked(Connection* conn)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A caller's share of the connections now (0: no limit).
  size_t ShareLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a caller has Writes on `share` connections already.
  bool AtShareLocked(const std::string& caller, size_t share) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A caller's Write entered the queue, or a connection carries its Writes
  // (Ref), or no longer (Unref): active_'s count.
  void RefLocked(const std::string& caller) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnrefLocked(const std::string& caller)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnrefAllLocked(const std::deque<std::unique_ptr<QueuedWrite>>& writes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queued Writes that a new batch could take (their callers below their
  // share).
  size_t TakeableLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After Writes were queued: decides whether another connection must be
  // opened for them now, and asks for a tick if none is asked for.
  // Returns the idle connection to send on (with `*batch` taken), if any.
  Connection* PlaceQueuedLocked(Batch* batch, bool* open)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // When the oldest Write a new batch could take was queued;
  // InfiniteFuture if none.
  absl::Time OldestTakeableLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // When the queue next needs a tick; InfiniteFuture if empty.
  absl::Time NextTickLocked(absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks for a tick at NextTickLocked() if none is asked for earlier.
  void WantTickLocked(absl::Time now, absl::Time* ask)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands `conn` the next batch, or puts it with the idle ones.
  Connection* NextForLocked(Connection* conn, Batch* batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails every write of `writes` with `error`.
  static void FailAll(std::deque<std::unique_ptr<QueuedWrite>> writes,
                      const absl::Status& error);

  const Options options_;
  Driver* const driver_;
  mutable absl::Mutex mu_;
  std::deque<std::unique_ptr<QueuedWrite>> queue_ ABSL_GUARDED_BY(mu_);
  // Every open connection; the idle ones also in idle_.
  std::vector<std::unique_ptr<Connection>> open_ ABSL_GUARDED_BY(mu_);
  std::vector<Connection*> idle_ ABSL_GUARDED_BY(mu_);
  int opening_ ABSL_GUARDED_BY(mu_) = 0;
  // The tick asked for (InfiniteFuture: none).
  absl::Time tick_at_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  // Per caller with Writes in flight: the connections carrying them.
  absl::flat_hash_map<std::string, size_t> carrying_ ABSL_GUARDED_BY(mu_);
  // Per caller: its Writes queued plus the connections carrying its Writes
  // (the callers counted in a fair share).
  absl::flat_hash_map<std::string, int> active_ ABSL_GUARDED_BY(mu_);
  // Per connection carrying a batch: the callers it counts against.
  absl::flat_hash_map<Connection*, std::vector<std::string>> callers_of_
      ABSL_GUARDED_BY(mu_);
  // Set by Abandon() or Stop(): Writes fail with it at once.
  absl::Status refusing_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fencegate::postgres

#endif  // STORAGE_ADAPTERS_POSTGRES_BATCH_QUEUE_H_
