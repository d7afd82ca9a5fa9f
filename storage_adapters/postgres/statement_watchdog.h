// Copyright fencegate authors.
//
// StatementWatchdog: the gateway's own deadline on PostgreSQL. A sender
// watches its connection while a batch is on its way; if a Write is still
// running the limit after the one before it completed, or past its client's
// deadline, the watchdog cancels what the server is running (PQcancel),
// whatever statement_timeout the session set (SET LOCAL statement_timeout = 0
// cannot switch it off). The cancelled statement fails with SQLSTATE 57014
// and its Write rolls back.
//
// PostgreSQL's cancel protocol names a session, not a statement: a cancel
// that reaches the server just as the slow Write ends may hit the next
// statement on that connection instead, which then fails the same way
// (rolled back). Senders drop a connection whose batch was cancelled.
//
// Thread safety: safe for concurrent use. A Watch is used by the thread
// that made it. The watchdog has one thread ("pg-watchdog"), which looks
// every 100 ms (a cancel comes up to that late) and is never woken by a
// Watch; PQcancel runs on it (it opens a connection to the server, so it
// may take up to connect_timeout).

#ifndef STORAGE_ADAPTERS_POSTGRES_STATEMENT_WATCHDOG_H_
#define STORAGE_ADAPTERS_POSTGRES_STATEMENT_WATCHDOG_H_

#include <libpq-fe.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace fencegate::postgres {

class StatementWatchdog {
 public:
  // `limit`: how long a batch may go without a Write completing.
  // InfiniteDuration(): only clients' deadlines and CancelAll() cancel.
  explicit StatementWatchdog(absl::Duration limit);
  StatementWatchdog(const StatementWatchdog&) = delete;
  StatementWatchdog& operator=(const StatementWatchdog&) = delete;
  ~StatementWatchdog();

  // Watches one connection from construction to destruction.
  class Watch {
   public:
    // `conn` must stay open until the Watch is destroyed.
    Watch(StatementWatchdog* dog, PGconn* conn);
    Watch(const Watch&) = delete;
    Watch& operator=(const Watch&) = delete;
    ~Watch();
    // The next Write on the connection is being waited for: it is cancelled
    // at the earlier of now + the limit and `deadline` (its client's), or at
    // once after CancelAll().
    void Progress(absl::Time deadline = absl::InfiniteFuture());
    // True once the watchdog cancelled a statement on this connection.
    bool cancelled() const;
    // Stops watching: no cancel is sent after it returns. Returns
    // cancelled(): a connection that was cancelled must not be reused, as
    // a cancel may still be on its way to the server.
    bool Disarm();

   private:
    friend class StatementWatchdog;
    struct State;
    StatementWatchdog* dog_;
    std::shared_ptr<State> state_;
  };

  // Cancels every watched statement now, and every one watched later as
  // soon as it is watched (shutdown: the gateway's grace has passed).
  void CancelAll();

 private:
  void Run();
  // Sends a cancel for the statement running under `state`, recording that
  // the deadline `deadline_ns` was acted on (0: whatever the deadline).
  void Cancel(const std::shared_ptr<Watch::State>& state, int64_t deadline_ns);

  const absl::Duration limit_;
  std::atomic<bool> cancel_all_{false};
  absl::Mutex mu_;
  std::vector<std::shared_ptr<Watch::State>> watched_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // Last: starts after everything it uses.
};

}  // namespace fencegate::postgres

#endif  // STORAGE_ADAPTERS_POSTGRES_STATEMENT_WATCHDOG_H_
