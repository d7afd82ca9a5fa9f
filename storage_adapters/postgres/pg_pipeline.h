// Copyright fencegate authors.
//
// PgPipeline: one batch of Writes on one non-blocking libpq connection, in
// pipeline mode. Send() queues every Write's pipeline -- the prepared fence
// call, its statements (inside BEGIN ... COMMIT for a dirty Write) and a
// sync, so that each Write is its own implicit transaction -- and, after a
// dirty Write, the session reset (ROLLBACK, DISCARD ALL, the fence call
// prepared again). Read() then takes whatever results have arrived and
// sets each Write's outcome, never waiting for more: the caller waits for
// the socket (PQsocket) to be readable, or writable while Flush() says
// output is left, and calls again.
//
// What a result means is documented in postgres_adapter.h (errors, stale
// tokens, a session that ended, outcome unknown). A Write that nothing
// committed on a session the server ended is marked retryable.
//
// Thread safety: none; one thread at a time, with the connection's.

#ifndef STORAGE_ADAPTERS_POSTGRES_PG_PIPELINE_H_
#define STORAGE_ADAPTERS_POSTGRES_PG_PIPELINE_H_

#include <libpq-fe.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "storage_adapters/postgres/batch_queue.h"
#include "storage_adapters/postgres/pg_connection.h"
#include "storage_adapters/postgres/sql_text.h"

namespace fencegate::postgres {

class PgPipeline {
 public:
  struct Settings {
    std::string fence_call_sql;    // Prepared again after a reset.
    std::string fence_seq_sql;     // For a Write with a seq; not prepared.
    std::string release_sql;       // fence_hold.h's ReleaseSql().
    int statement_timeout_ms = 0;  // For the cancelled Write's message.
    int64_t max_result_rows = 0;
    int64_t max_result_bytes = 0;
  };

  // `conn` must be non-blocking, idle and outlive the pipeline.
  PgPipeline(PgConnection* conn, const Settings* settings);

  // Queues the Writes of `batch` (which it does not own; each must stay
  // until Read() reports kDone) and pushes what it can to the server.
  // Returns how many were queued whole; the others have their outcome set
  // (nothing of them was committed). Zero: read nothing, the connection is
  // unusable.
  size_t Send(const std::vector<QueuedWrite*>& batch);

  // Pushes queued output: 0 when all is sent, 1 when some is left (wait
  // until the socket is writable), -1 when the connection failed (Read()
  // then reports it).
  int Flush();

  enum class Progress { kNeedInput, kDone };
  // Reads what has arrived. kDone once every sent Write has its outcome
  // (stale tokens as StaleTokenError) and usable() is known. `cancelled`:
  // the gateway cancelled a statement on this session (a 57014 is then its
  // deadline, DEADLINE_EXCEEDED).
  Progress Read(bool cancelled);

  // The Write being waited for (its index in the batch); the batch's size
  // once every one is read.
  size_t reading() const { return write_; }

  // After kDone: the connection may carry another batch. Not after a row
  // of more than kKeptRowBytes: libpq keeps the input buffer it grew for
  // it for the connection's life, so the connection is closed, and the
  // memory given back, instead of pooled.
  bool usable() const { return usable_; }
  static constexpr int64_t kKeptRowBytes = int64_t{4} << 20;

 private:
  // A row read (single-row mode): one past kKeptRowBytes makes the
  // connection unusable.
  void NoteRow(const PGresult* r);
  // How a Write's results ended: at its sync, or with the connection.
  enum class Ending {
    kSynced,           // Its sync came back: the connection is usable.
    kEndedBeforeSync,  // The server ended the session before the sync.
    kLost,             // The connection broke; later writes: unknown.
  };
  enum class Phase {
    kResult,         // The result of query q_ (rows, or its end).
    kEnd,            // The null that ends query q_.
    kSync,           // The Write's sync.
    kReleaseResult,  // Release rel_ (before the Writes).
    kReleaseEnd,
    kReleaseSync,
    kResetResult,  // The reset's query q_ (0 ROLLBACK, 1 DISCARD, 2 PREPARE).
    kResetEnd,
    kResetSync,
    kFinished,
  };

  // How a Write is fenced on an armed connection (held_domains.h).
  enum class Fenced : uint8_t {
    kCall,     // fence() or fence_seq(), as on any connection.
    kHolding,  // fence_hold(): held once it commits.
    kHeld,     // The connection holds its (domain, token): no statement.
  };
  bool SendWrite(const QueuedWrite& w, Fenced* fenced);
  // The connection broke after the write was sent, with no error before
  // it; the server ended the session before it ran any of the write.
  static absl::Status LostAfterSent(PGconn* c);
  static absl::Status ClosedBeforeRan(PGconn* c);
  // pg_pipeline_holds.cc: the releases the connection owes
  // (held_domains.h), a domain held at another token than a Write's among
  // them, taken into releases_.
  void TakeReleases();
  // Sends them, each in a segment of its own, before the batch's Writes.
  bool SendReleases();
  // Feeds one result of the releases to the state machine.
  void FeedRelease(PgResult r);
  // The connection ended (`closed`: the server ended the session before
  // the Writes ran) or broke while the releases were read.
  void EndInReleases(bool closed);
  // After a synced batch: what the connection holds now.
  void NoteHolds();
  bool SendReset();
  // Starts reading write `write_` (or the reset, or finishes).
  void BeginWrite();
  // Feeds one result (null included) to the state machine.
  void Feed(PgResult r, bool cancelled);
  // Query q_ of the Write being read ended with an error result `r` (null:
  // the connection failed). Returns false if the batch ends here.
  bool OnError(const PGresult* r, bool cancelled);
  // Ends the batch: `ending` for the Write being read (and so for the rest).
  void Finish(Ending ending);
  // Moves to query q_ + 1 (or the sync).
  void NextQuery();

  PgConnection* const conn_;
  const Settings* const settings_;
  std::vector<QueuedWrite*> batch_;
  std::vector<Fenced> fenced_;         // Per Write of batch_.
  std::vector<bool> kept_;             // fence_hold() holds, per Write.
  std::vector<std::string> releases_;  // Sent before the Writes.
  size_t rel_ = 0;
  size_t sent_ = 0;
  bool reset_ = false;  // A reset follows the last Write.
  bool usable_ = true;
  Phase phase_ = Phase::kFinished;
  // The Write being read, and its state.
  size_t write_ = 0;
  int q_ = 0;
  int queries_ = 0;
  int fence_query_ = 0;    // The last query before the operations.
  bool has_fence_ = true;  // Query fence_query_ is the fence call.
  int commit_query_ = -1;
  bool failed_ = false;
  v1::SqlResult* out_ = nullptr;
  ResultBudget budget_;
  bool reset_ok_ = true;
};

}  // namespace fencegate::postgres

#endif  // STORAGE_ADAPTERS_POSTGRES_PG_PIPELINE_H_
