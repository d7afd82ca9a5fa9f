// Copyright fencegate authors.
//
// PostgresAdapter: applies SqlStatement operations to PostgreSQL, fenced
// inside the database as well.
//
// Every Write is one transaction, sent in one round trip (libpq's pipeline
// mode: the queries and a sync go out together, and the server runs them as
// one implicit transaction that commits at the sync):
//   1. <fence_schema>.fence(domain, token) (fence_schema.h), prepared once
//      per connection: the domain's row is raised, or kept if equal, under
//      its row lock, so a raise waits for the transactions of lower tokens;
//      if the database already holds a higher token -- from another gateway
//      or a direct writer following the same protocol -- it fails (SQLSTATE
//      FG001), the server skips every statement after it, and the write
//      fails as stale (FAILED_PRECONDITION with a StaleToken detail holding
//      the database's token), exactly like a stale write refused by the
//      gateway;
//   2. the statements run in order, each with its parameters;
//   3. the sync commits. Any failure rolls back everything, the fence row
//      included.
//
// Sessions are pooled and are not reset between Writes. Instead, Validate
// knows what each statement can do to its session, from PostgreSQL's own
// parser (sql_classifier.h), and refuses (INVALID_ARGUMENT, naming the
// statement kind) every statement that could leave state behind for a later
// Write: utility statements (SET, PREPARE, LISTEN, DECLARE, CREATE TEMP,
// BEGIN, COMMIT, COPY, ...), SELECT INTO, more than one statement, text that
// does not parse, and calls of functions that reach session state
// (set_config, session advisory locks, currval, dblink, ...). Dirty
// statements -- DO and CALL, on routes with allow_dirty_statements=true, and
// named statements not marked session_safe -- run last in their batch,
// wrapped in BEGIN ... COMMIT (in a transaction block PostgreSQL forbids
// them to commit or roll back), and the session is reset (DISCARD ALL, and
// the fence call prepared again) in the same round trip, before the
// connection serves another Write; if the dirty Write or the reset fails,
// the connection is closed. As a tripwire, after each batch every parameter
// the server reports (PQparameterStatus) is compared with the session's
// baseline: a difference closes the connection, is counted
// (fencegate_postgres_session_escapes_total) and reported to the route's
// warning sink with the batch's request ids. The route role itself must not
// be able to make anything outlast a Write (role_check.h: no TEMP, no
// CREATE on any schema, no other role's membership, no settings of its own),
// and search_path is pinned in the startup packet with pg_temp last.
//
// Concurrent Writes share round trips: at most pool_size batches are in
// flight, one per connection, and a Write that arrives while they are
// waits in a queue and goes out with the next batch (up to kMaxBatch
// Writes). Queued Writes wait for a busy connection's next batch rather
// than go to an idle one, unless they would not fit in it or have waited
// spread_after_ms (then an idle or new connection takes them): fewer
// connections carrying bigger batches cost the database and the gateway
// less per Write. Each Write in a batch ends with its own sync, so it stays its
// own transaction: its errors roll back only itself. ApplyAsync never
// waits for the database: it queues the write (taking the queue's mutex
// for a moment, and starting a sender thread the first pool_size times)
// for the adapter's sender threads, one per connection, each of which
// sends a batch, reads its outcomes, and reports them after sending the
// next batch, if writes are queued, so the server runs it meanwhile. A write
// that waited pool_wait_ms for a connection gives up with UNAVAILABLE without
// being sent (within a tenth of pool_wait_ms more, at most 100 ms). So the
// database is authoritative for its own data: gateways that do not share a
// fence store still never apply a stale write.
//
// A Write still running statement_timeout_ms + 1 s after the one before it
// on its connection completed, or past its client's deadline, is cancelled
// from the gateway (PQcancel), so no statement outlives the route's timeout
// whatever the session set; the Write fails DEADLINE_EXCEEDED, rolled back.
// NUL bytes in SQL text or text parameters are refused by Validate (libpq
// would cut the string there).
//
// Every new connection reads its role's privileges (role_check.h) and is
// refused (FAILED_PRECONDITION) if the role cannot call the fence function,
// or is privileged or can keep state beyond a Write and the URI does not
// allow it; CheckAtStartup does the same once before the gateway serves.
//
// Errors: SQL errors carry the SQLSTATE in the message and a SqlError
// detail; integrity violations (class 23) are FAILED_PRECONDITION, a
// statement timeout DEADLINE_EXCEEDED, serialization failures and deadlocks
// ABORTED, other SQL errors INVALID_ARGUMENT. An unreachable server is
// UNAVAILABLE; a connection lost after the write was sent, with no error
// before it, is UNAVAILABLE with "outcome unknown". A write that never fully
// reached the server, or that the server aborted while ending the session
// (e.g. on shutdown), is retried once on a fresh connection, which is safe:
// nothing was committed. Pooled connections that the server closed while
// idle are replaced before use.
//
// Tokens above 2^63-1 (PostgreSQL's bigint) are refused by Validate with
// INVALID_ARGUMENT, before any fence moves.

#ifndef STORAGE_ADAPTERS_POSTGRES_POSTGRES_ADAPTER_H_
#define STORAGE_ADAPTERS_POSTGRES_POSTGRES_ADAPTER_H_

#include <libpq-fe.h>

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/histogram.h"
#include "storage_adapters/postgres/config.h"
#include "storage_adapters/postgres/connection_pool.h"
#include "storage_adapters/postgres/sql_classifier.h"
#include "storage_adapters/postgres/statement_watchdog.h"
#include "storage_adapters/registry.h"
#include "storage_adapters/storage_adapter.h"

namespace fencegate {

class PostgresAdapter final : public StorageAdapter {
 public:
  // With metrics on, exports fencegate_postgres_connections{route,state}
  // (idle, busy; read at scrape), fencegate_postgres_queue_wait_seconds
  // {route} (from a write's queueing to a sender taking it into a batch, or
  // to its giving up after pool_wait_ms; a write sent again after a broken
  // connection is observed each time it waited),
  // fencegate_postgres_session_escapes_total{route},
  // fencegate_postgres_classifier_lookups_total{route,result=hit|miss} and
  // fencegate_postgres_classifier_cache{route,size=entries|bytes}.
  explicit PostgresAdapter(PostgresAdapterOptions options,
                           const AdapterContext& context = {});
  ~PostgresAdapter() override;

  absl::Status Validate(const WriteTarget& target,
                        const Operations& ops) const override;
  // Classifies `sql` (sql_classifier.h): INVALID_ARGUMENT for text that
  // holds no single statement, transaction control or COPY; otherwise the
  // statement is kept by name, safe if it classifies so or `session_safe`,
  // dirty otherwise (allowed whatever allow_dirty_statements says: the
  // operator wrote it).
  absl::Status AddNamedStatement(const std::string& name,
                                 const std::string& sql,
                                 bool session_safe) override;
  // Blocks until the write's outcome is known.
  absl::Status Apply(const WriteTarget& target, const Operations& ops,
                     OpResults* results) override;
  // Queues the write for a sender thread and returns.
  void ApplyAsync(const WriteTarget& target, const Operations& ops,
                  OpResults* results, ApplyCallback done) override;
  bool ApplyAsyncNeverBlocks() const override { return true; }
  // Connects once (if PostgreSQL can be reached) and checks the role:
  // FAILED_PRECONDITION as for every new connection. Returns the role's
  // attributes for the log, or why they could not be read yet.
  absl::StatusOr<std::string> CheckAtStartup() override;
  // PQping: the server accepts connections (up to connect_timeout).
  absl::Status Probe() override;
  // Cancels the statements in flight, fails the queued writes (never
  // sent), and fails every later write at once.
  void CancelInFlight() override;

  // The fence table (fence_schema.h), reached through fence(),
  // fence_next() and fences() on connections of their own (at most two,
  // opened when first needed, checked as every connection is): a raise
  // waits for the in-flight transactions of lower tokens, from any
  // gateway. Tokens above 2^63-1 are INVALID_ARGUMENT (OUT_OF_RANGE for
  // NextFence); the stale-token error holds the database's token.
  bool KeepsFences() const override { return true; }
  absl::Status RaiseFence(absl::string_view domain, uint64_t token) override;
  absl::StatusOr<uint64_t> NextFence(absl::string_view domain,
                                     uint64_t at_least) override;
  absl::Status ReadFences(
      absl::FunctionRef<void(absl::string_view domain, uint64_t token)> fn)
      override;

 private:
  // A Write waiting for, or travelling in, a batch; owned by the queue,
  // then by its batch's sender, until its callback has run.
  struct PendingWrite {
    const WriteTarget* target = nullptr;
    const Operations* ops = nullptr;
    OpResults* results = nullptr;
    ApplyCallback done;
    absl::Time queued_at;    // When it last entered the queue.
    int attempts = 0;        // Batches it was sent in.
    absl::Status status;     // Set by the batch's sender.
    bool retryable = false;  // Nothing was committed; safe to send again.
    bool stale = false;      // The database holds a higher token.
    uint64_t held = 0;       // The database's token, when stale.
    bool dirty = false;      // Sent in BEGIN ... COMMIT, then a reset.
  };
  // How a write's results ended: at its sync, or with the connection.
  enum class Ending {
    kSynced,           // Its sync came back: the connection is usable.
    kEndedBeforeSync,  // The server ended the session before the sync.
    kLost,             // The connection broke; later writes: unknown.
  };
  // Writes sent in one round trip at most.
  static constexpr size_t kMaxBatch = 16;

  // A sender thread (one per connection, started when first needed):
  // sends the oldest queued writes as one batch on one connection, each
  // write its own transaction, reads their outcomes, and reports them
  // while the server runs the next batch (queueing again, once, a write
  // that nothing committed when the connection broke); waits for more,
  // until the adapter is destroyed.
  void Send();
  // Sends `batch` in one pipeline on `*lease` (acquired if empty); returns
  // how many writes were sent. Writes not sent have their outcome set; if
  // none could be sent for want of a connection, `*lease` is left empty.
  size_t SendBatch(std::optional<PgConnectionPool::Lease>* lease,
                   const std::vector<PendingWrite*>& batch);
  // Reads the results of the `sent` first writes of `batch` and sets every
  // write's outcome; empties `*lease`, closing the connection, if it
  // cannot be used again.
  void ReadBatch(std::optional<PgConnectionPool::Lease>* lease,
                 const std::vector<PendingWrite*>& batch, size_t sent,
                 postgres::StatementWatchdog::Watch* watch);
  // Reports each write's outcome, except a failure that nothing committed,
  // on its first attempt: those are returned, reset, to be sent again.
  std::vector<std::unique_ptr<PendingWrite>> ReportBatch(
      std::vector<std::unique_ptr<PendingWrite>> batch);
  // After a write was queued: wakes or starts a sender if the senders on
  // their way will not take it. False if no sender ever will (no thread
  // could be started and none exists).
  bool CallSenderForQueuedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_);
  // Puts `retries` back at the front of the queue.
  void RequeueLocked(std::vector<std::unique_ptr<PendingWrite>> retries)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_);
  // Fails writes that waited pool_wait_ms, and calls a sender for writes
  // that waited spread_after_ (SpreadLocked), until the adapter is
  // destroyed. Looks once a tick (a tenth of pool_wait_ms, 1 to 100 ms),
  // and sooner when called (expirer_called_).
  void ExpireQueued();
  // True if no sender is on its way (signalled or starting) and one can be
  // called: an idle one, or a new one while there are fewer than
  // pool_size.
  bool CanCallSenderLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_);
  // When the oldest queued write was queued; InfiniteFuture if none.
  absl::Time OldestQueuedLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_);
  // Starts a sender thread, counted in starting_; false if the system
  // cannot start a thread.
  bool StartSenderLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_);
  // If the oldest queued write has waited spread_after_ for the senders
  // carrying batches, wakes an idle sender or starts one for it.
  void SpreadLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_);
  // Queues one write's queries and its sync; false if sending failed.
  bool SendWrite(PgConnection& conn, const PendingWrite& w);
  // Queues the session reset after a dirty write: ROLLBACK (ending the
  // write's block if it failed in it) and a sync, then DISCARD ALL, the
  // fence call prepared again, and a sync; false if sending failed.
  bool SendReset(PgConnection& conn);
  // Reads the reset's results; false if it failed (drop the connection).
  bool ReadReset(PGconn* c);
  // After a batch: true if the session's reported parameters still match
  // its baseline; otherwise counts and reports the escape.
  bool SessionUnchanged(PgConnection& conn,
                        const std::vector<PendingWrite*>& batch, size_t sent);
  // The verdict for operation `op` (named statements by their name).
  postgres::StatementClass ClassOf(const v1::SqlStatement& op) const;
  // True if any operation of `ops` is dirty.
  bool IsDirty(const Operations& ops) const;
  // Reads one write's results (its reset's first) up to its sync.
  Ending ReadWrite(PgConnection& conn, PendingWrite* w,
                   const postgres::StatementWatchdog::Watch& watch);
  // Checks the role of a new connection (role_check.h).
  absl::Status SetUpConnection(PgConnection& c);
  // Runs one fence query on a control connection: its result if it
  // returned rows; the SQL error otherwise, with its SQLSTATE in
  // `*sqlstate` and the error's DETAIL in `*detail`.
  absl::StatusOr<postgres::PgResult> ExecControl(
      const std::string& sql, const std::vector<std::string>& params,
      std::string* sqlstate, std::string* detail);

  const PostgresAdapterOptions options_;
  const std::string fence_call_sql_;
  const std::function<void(const std::string&)> on_warning_;
  // Verdicts of SQL texts sent by callers (bounded cache).
  mutable postgres::StatementClassifier classifier_;
  // What AddNamedStatement learnt of a named statement.
  struct NamedStatement {
    postgres::StatementClass kind;
    int params;  // The parameters it takes.
  };
  // Named statements, by name; filled before the first Write.
  absl::flat_hash_map<std::string, NamedStatement> named_;
  // Null when metrics are off.
  prometheus::Counter* escapes_ = nullptr;
  prometheus::Counter* classifier_hits_ = nullptr;
  prometheus::Counter* classifier_misses_ = nullptr;
  std::shared_ptr<void> cache_entries_gauge_, cache_bytes_gauge_;
  // options_.spread_after_ms, at most half of pool_wait_ms.
  const absl::Duration spread_after_;
  PgConnectionPool pool_;
  // For RaiseFence, NextFence and ReadFences.
  PgConnectionPool control_pool_;
  // Null when metrics are off.
  prometheus::Histogram* queue_wait_ = nullptr;
  std::shared_ptr<void> idle_gauge_, busy_gauge_;
  absl::Mutex queue_mu_;
  std::deque<std::unique_ptr<PendingWrite>> queue_ ABSL_GUARDED_BY(queue_mu_);
  absl::CondVar queue_cv_;  // Signalled when a write waits for a sender.
  std::vector<std::thread> senders_ ABSL_GUARDED_BY(queue_mu_);
  int idle_senders_ ABSL_GUARDED_BY(queue_mu_) = 0;
  // Idle senders signalled, and senders started, that have not yet taken
  // the lock. Each will take up to kMaxBatch queued writes, so a write they
  // will take wakes no other sender; a write beyond them wakes an idle
  // sender, or starts one while there are fewer than pool_size.
  int signalled_ ABSL_GUARDED_BY(queue_mu_) = 0;
  int starting_ ABSL_GUARDED_BY(queue_mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(queue_mu_) = false;
  // Set when a queued write waits for a sender carrying a batch: wakes the
  // expirer, which otherwise looks at the queue once a tick.
  bool expirer_called_ ABSL_GUARDED_BY(queue_mu_) = false;
  // Set by CancelInFlight(): new writes fail at once.
  bool abandoned_ ABSL_GUARDED_BY(queue_mu_) = false;
  // Cancels a batch when no write of it completes within
  // statement_timeout_ms + 1 s.
  postgres::StatementWatchdog watchdog_;
  // Runs ExpireQueued(); last, so it starts after everything it uses.
  std::thread expirer_;
};

}  // namespace fencegate

#endif  // STORAGE_ADAPTERS_POSTGRES_POSTGRES_ADAPTER_H_
