// Copyright fencegate authors.
//
// PostgresAdapter: applies SqlStatement operations to PostgreSQL, fenced
// inside the database as well.
//
// Every Write is one transaction, sent in one round trip (libpq's pipeline
// mode: the queries and a sync go out together, and the server runs them as
// one implicit transaction that commits at the sync):
//   1. <fence_schema>.fence(domain, token) (fence_schema.h), or fence_seq()
//      for a Write with a seq (KeepsSeq below), prepared once per
//      connection: the domain's row is raised, or kept if equal, under
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
// flight, one per connection, and which Writes travel together, on which
// connection, is the BatchQueue's (batch_queue.h): a Write that finds a
// connection idle and nothing queued is sent at once, by the thread that
// calls ApplyAsync; one that arrives while batches are in flight waits for
// a busy connection's next batch (up to kMaxBatch Writes) rather than go
// to an idle or new one, unless it would not fit in it or has waited
// spread_after_ms: fewer connections carrying bigger batches cost the
// database and the gateway less per Write. Each Write in a batch ends with
// its own sync, so it stays its own transaction: its errors roll back only
// itself. A write that waited pool_wait_ms for a connection gives up with
// UNAVAILABLE without being sent.
//
// Threads: ApplyAsync never waits for the database. Connections are
// non-blocking; one event loop ("pg-loop", Boost.Asio) reads every
// connection's replies (PgPipeline, pg_pipeline.h), keeps the deadlines and
// the queue's timer, and, when a batch is read, sends the connection's next
// batch before it reports the outcomes, so the server runs it meanwhile.
// Opening a connection (which blocks up to connect_timeout) and sending a
// cancel run on short-lived helper threads ("pg-connect", "pg-cancel"). So
// the database is authoritative for its own data: gateways that do not
// share a fence store still never apply a stale write.
//
// A Write still running statement_timeout_ms + 1 s after the one before it
// on its connection completed, or past its client's deadline, is cancelled
// from the gateway (PQcancel), so no statement outlives the route's timeout
// whatever the session set; the Write fails DEADLINE_EXCEEDED, rolled back,
// and the connection is not used again.
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

#include <atomic>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/posix/stream_descriptor.hpp"
#include "boost/asio/steady_timer.hpp"
#include "fencegate/common/periodic_thread.h"
#include "postgres/catalog_names.h"
#include "postgres/route_options.h"
#include "postgres/sql_classifier.h"
#include "prometheus/counter.h"
#include "prometheus/histogram.h"
#include "storage_adapters/postgres/batch_queue.h"
#include "storage_adapters/postgres/connection_pool.h"
#include "storage_adapters/postgres/hold_tally.h"
#include "storage_adapters/postgres/pg_pipeline.h"
#include "storage_adapters/registry.h"
#include "storage_adapters/storage_adapter.h"

namespace fencegate {

class PostgresAdapter final : public StorageAdapter,
                              private postgres::BatchQueue::Driver {
 public:
  // With metrics on, exports fencegate_postgres_connections{route,state}
  // (idle, busy; read at scrape), fencegate_postgres_queue_wait_seconds
  // {route} (from a write's queueing to a connection taking it into a
  // batch, or to its giving up after pool_wait_ms; a write sent again after
  // a broken connection is observed each time it waited),
  // fencegate_postgres_session_escapes_total{route},
  // fencegate_postgres_classifier_lookups_total{route,result=hit|miss} and
  // fencegate_postgres_classifier_cache{route,size=entries|bytes}.
  explicit PostgresAdapter(postgres::RouteOptions options,
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
  // Sends the write on an idle connection (never waiting for its reply), or
  // queues it, and returns.
  void ApplyAsync(const WriteTarget& target, const Operations& ops,
                  OpResults* results, ApplyCallback done) override;
  bool ApplyAsyncNeverBlocks() const override { return true; }
  // Connects once (if PostgreSQL can be reached) and checks the role:
  // FAILED_PRECONDITION as for every new connection. Returns the role's
  // attributes for the log, or why they could not be read yet.
  absl::StatusOr<std::string> CheckAtStartup() override;
  // PQping: the server accepts connections (up to connect_timeout).
  absl::Status Probe() override;
  absl::StatusOr<int> OtherGateways() override;
  // Each caller has a share of the connections (max_connections_per_caller).
  bool UsesCaller() const override { return true; }
  // Cancels the statements in flight, fails the queued writes (never
  // sent), and fails every later write at once.
  void CancelInFlight() override;

  // The fence table (fence_schema.h), reached through fence(),
  // fence_next() and fences() on connections of their own
  // (kControlConnections at most, opened when first needed, checked as
  // every connection is, kControlConnectionsKept kept open when idle): a
  // raise waits for the in-flight transactions of lower tokens, and for
  // the connections that hold the domain (fence_hold.h), from any gateway,
  // on a connection of its own, so that fewer than kControlConnections
  // raises waiting at once leave the others' reads and raises served. Tokens
  // above 2^63-1 are INVALID_ARGUMENT (OUT_OF_RANGE for NextFence); the
  // stale-token error holds the database's token.
  bool KeepsFences() const override { return true; }
  // A Write with a seq calls fence_seq() instead of fence() (fence_schema.h):
  // its (token, seq) is recorded in the fence row, in its own transaction.
  // The database's FG004 (applied already) is OK with `replayed` set and no
  // results; FG003 is SeqOutOfOrderError; a database whose fence schema
  // predates fence_seq() is FAILED_PRECONDITION naming pg-setup.
  bool KeepsSeq() const override { return true; }
  absl::Status RaiseFence(absl::string_view domain, uint64_t token) override;
  uint64_t MaxFenceToken() const override;
  absl::StatusOr<uint64_t> ReadFence(absl::string_view domain) override;
  absl::StatusOr<uint64_t> NextFence(absl::string_view domain,
                                     uint64_t at_least) override;
  absl::Status ReadFences(
      absl::FunctionRef<void(absl::string_view domain, uint64_t token)> fn)
      override;

 private:
  static constexpr size_t kNotWatched = ~size_t{0};
  // One pooled connection and its I/O on the event loop, shared with the
  // loop's handlers (which may run after the connection was closed: they
  // find `closed` set). Whoever sends a batch on it holds `mu` while
  // sending; the loop's handlers hold it while they read.
  struct Link {
    // `socket_fd`: a descriptor of `conn`'s socket, owned by the Link.
    Link(boost::asio::io_context& io, std::unique_ptr<PgConnection> conn,
         int socket_fd, const postgres::PgPipeline::Settings* settings);
    absl::Mutex mu;
    const std::unique_ptr<PgConnection> pg;
    // The session's socket, as a descriptor of the loop's own.
    boost::asio::posix::stream_descriptor socket ABSL_GUARDED_BY(mu);
    boost::asio::steady_timer deadline ABSL_GUARDED_BY(mu);
    postgres::PgPipeline pipeline ABSL_GUARDED_BY(mu);
    // For PQcancel, which may outlive the connection on a helper thread.
    std::shared_ptr<PGcancel> cancel;
    postgres::BatchQueue::Connection* owner = nullptr;  // Set once.
    postgres::Batch batch ABSL_GUARDED_BY(mu);          // In flight.
    bool closed ABSL_GUARDED_BY(mu) = false;
    bool reading ABSL_GUARDED_BY(mu) = false;  // A batch's replies are due.
    bool read_pending ABSL_GUARDED_BY(mu) = false;  // A wait is registered.
    bool cancelled ABSL_GUARDED_BY(mu) = false;     // A cancel was sent.
    // The Write whose deadline is armed (kNotWatched: none), and the
    // arming's number, which only grows: a deadline that fires late names
    // an arming that is over.
    size_t watched ABSL_GUARDED_BY(mu) = kNotWatched;
    uint64_t watch ABSL_GUARDED_BY(mu) = 0;
  };
  // A Link as the batch queue holds it; closes the Link when destroyed.
  class LoopConnection;
  // Writes sent in one round trip at most.
  static constexpr size_t kMaxBatch = 16;
  // The fence table's connections: at most, and kept open when idle.
  static constexpr int kControlConnections = 16;
  static constexpr int kControlConnectionsKept = 2;
  // How often the raise watch asks (pgport's RaiseWatch asks as often).
  static constexpr absl::Duration kHoldWatchInterval = absl::Milliseconds(100);

  // BatchQueue::Driver: sends a batch on the caller's thread (the one that
  // added the Write, or the loop's), never blocking; opens a connection on a
  // helper thread; asks the loop's timer for a tick.
  void Send(postgres::BatchQueue::Connection* conn,
            postgres::Batch batch) override;
  void Open() override;
  void TickAt(absl::Time when) override;

  // Waits (on the loop) for the server's reply on `link`, unless a wait is
  // pending.
  void WaitReadableLocked(const std::shared_ptr<Link>& link)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(link->mu);
  // Waits (on the loop) for room to send the rest of the batch.
  void WaitWritableLocked(const std::shared_ptr<Link>& link)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(link->mu);
  // Reads what has arrived: true once the batch is read; otherwise a wait
  // for more is registered.
  bool ReadLocked(const std::shared_ptr<Link>& link)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(link->mu);
  // The loop's handlers: reply data (`from_wait`: the registered wait
  // fired; otherwise a look posted by the sender), room to send, a
  // statement deadline.
  void OnReadable(const std::shared_ptr<Link>& link, bool from_wait);
  void OnWritable(const std::shared_ptr<Link>& link);
  void OnDeadline(const std::shared_ptr<Link>& link, uint64_t watch);
  // Arms the deadline of the Write the pipeline now waits for, if it moved
  // on: statement_timeout_ms + 1 s from now, or its call's deadline.
  void WatchLocked(const std::shared_ptr<Link>& link)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(link->mu);
  // Sends a cancel for what `link`'s session runs (PQcancel, on a helper
  // thread: it opens a connection to the server).
  void CancelLocked(Link& link) ABSL_EXCLUSIVE_LOCKS_REQUIRED(link.mu);
  // `link`'s batch is read: the queue gets the connection back (and sends
  // its next batch), then each Write's outcome is reported, except a
  // failure that nothing committed on its first attempt: that is queued
  // again.
  void Complete(const std::shared_ptr<Link>& link);
  // Opens and sets up a connection for the queue (on a helper thread).
  absl::StatusOr<std::unique_ptr<LoopConnection>> OpenConnection();
  // Runs `fn` on a new thread named `name`; false if none can be started.
  // Finished threads are joined by the next call and the destructor.
  bool Spawn(const char* name, absl::AnyInvocable<void() &&> fn);
  // Joins every helper thread.
  void JoinHelpers();
  // After a batch: true if the session's reported parameters still match
  // its baseline; otherwise counts and reports the escape.
  bool SessionUnchanged(PgConnection& conn, const postgres::Batch& batch);
  // "fg-gw:<8 hex digits of a hash of `schema`>:", the application_name
  // prefix of the presence connections of one fence schema's gateways.
  static std::string PresencePrefixOf(const std::string& schema);
  // The presence connection (OtherGateways), opened if it is not open.
  absl::Status OpenPresenceLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(presence_mu_);
  // Whether any operation of `ops` is dirty (its session is reset after
  // it), and whether any calls code outside pg_catalog (it ends its batch,
  // so that the tripwire runs before another caller's Write;
  // catalog_names.h).
  void Inspect(const Operations& ops, bool* dirty, bool* opaque) const;
  // The catalog's names, as the newest connection read them; null before.
  std::shared_ptr<const postgres::CatalogNames> catalog_names() const;
  // Checks the role of a new connection (role_check.h). `may_hold`, if
  // given, is told whether the role can execute none of the advisory lock
  // functions (so that no Write can give up a hold).
  absl::Status SetUpConnection(PgConnection& c, bool* may_hold = nullptr);
  // The route's held fence (postgres_adapter_holds.cc): arms a new pooled
  // connection if the route holds domains (held_domains > 0), the schema
  // has fence_hold(), the role may not take advisory locks itself and the
  // session runs at READ COMMITTED; otherwise leaves it to call fence().
  // Only a broken connection is an error.
  absl::Status ArmConnection(PgConnection& c);
  // The raise watch ("fg-hold-watch", every kHoldWatchInterval while any
  // connection holds a domain): asks the server which held domains a raise
  // waits for, has every connection that holds one owe its release (sent
  // before its next batch), and closes the idle ones among them, whose
  // session's end releases every hold at once.
  void WatchRaises();
  // Has every connection that holds one of `domains` owe its release (sent
  // before its next batch), and closes the idle ones among them: before a
  // Write or a raise of another token than they hold, so that it waits for
  // no holder of this route in the server, and for the raise watch.
  // `waiting`: a raise the watch saw waiting; otherwise this gateway's
  // own. Counted in fencegate_postgres_holds_given_up_total.
  void GiveUp(const std::vector<std::string>& domains, bool waiting = false);
  // Runs one fence query on a control connection: its result if it
  // returned rows; the SQL error otherwise, with its SQLSTATE in
  // `*sqlstate` and the error's DETAIL in `*detail`.
  absl::StatusOr<postgres::PgResult> ExecControl(
      const std::string& sql, const std::vector<std::string>& params,
      std::string* sqlstate, std::string* detail);

  const postgres::RouteOptions options_;
  // What the route's connections hold (before every connection, which
  // tells it what it gives up when it goes).
  postgres::HoldTally hold_tally_;
  const std::string fence_call_sql_;
  const std::function<void(const std::string&)> on_warning_;
  // Verdicts of SQL texts sent by callers: the gateway's classifier
  // (AdapterContext::sql_classifier), or the adapter's own.
  std::unique_ptr<postgres::SqlClassifier> own_classifier_;
  postgres::SqlClassifier* const classifier_;
  // What AddNamedStatement learnt of a named statement.
  struct NamedStatement {
    postgres::StatementClass kind;
    int params;                 // The parameters it takes.
    postgres::Callees callees;  // What it calls by name.
  };
  // Named statements, by name; filled before the first Write.
  absl::flat_hash_map<std::string, NamedStatement> named_;
  // This gateway's presence in the database: a connection of its own
  // named by application_name "fg-gw:<schema hash>:<instance>", which the
  // other gateways count in pg_stat_activity (OtherGateways).
  absl::Mutex presence_mu_;
  PGconn* presence_ ABSL_GUARDED_BY(presence_mu_) = nullptr;
  const std::string presence_prefix_ =
      PresencePrefixOf(options_.fence_schema);  // "fg-gw:<schema hash>:"
  const std::string presence_name_ = presence_prefix_ + GatewayInstanceId();
  mutable absl::Mutex catalog_mu_;
  std::shared_ptr<const postgres::CatalogNames> catalog_
      ABSL_GUARDED_BY(catalog_mu_);
  // Null when metrics are off.
  prometheus::Counter* escapes_ = nullptr;
  prometheus::Counter* classifier_hits_ = nullptr;
  prometheus::Counter* classifier_misses_ = nullptr;
  std::vector<std::shared_ptr<void>> cache_gauges_;
  // The statement limit: statement_timeout_ms + 1 s (infinite if 0).
  const absl::Duration statement_limit_;
  const postgres::PgPipeline::Settings pipeline_settings_;
  // For RaiseFence, NextFence and ReadFences.
  PgConnectionPool control_pool_;
  // Null when metrics are off.
  prometheus::Histogram* queue_wait_ = nullptr;
  std::shared_ptr<void> idle_gauge_, busy_gauge_, held_gauge_;
  // The held fence's counters (null when metrics are off).
  prometheus::Counter* given_up_own_ = nullptr;
  prometheus::Counter* given_up_waiting_ = nullptr;
  prometheus::Counter* hold_closes_ = nullptr;

  // The event loop: the connections' replies, their deadlines, the queue's
  // ticks. One thread ("pg-loop").
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type>
      work_;
  // Loop only.
  boost::asio::steady_timer tick_timer_;
  absl::Time tick_at_ = absl::InfiniteFuture();

  // Set by CancelInFlight(): every batch is cancelled as it is sent.
  std::atomic<bool> cancel_all_{false};
  // The raise watch's own connection (its thread only).
  std::unique_ptr<PgConnection> watch_conn_;
  PeriodicThread raise_watch_;
  // Every open connection's Link, for CancelInFlight() and the raise
  // watch.
  absl::Mutex links_mu_;
  std::vector<std::weak_ptr<Link>> links_ ABSL_GUARDED_BY(links_mu_);

  // Helper threads (opening connections, cancels), each with whether it
  // has finished.
  struct Helper {
    std::thread thread;
    bool finished = false;
  };
  absl::Mutex helpers_mu_;
  std::list<Helper> helpers_ ABSL_GUARDED_BY(helpers_mu_);

  // After io_: its connections hold the loop's I/O objects.
  postgres::BatchQueue queue_;
  std::thread loop_;  // Last: starts after everything it uses.
};

}  // namespace fencegate

#endif  // STORAGE_ADAPTERS_POSTGRES_POSTGRES_ADAPTER_H_
