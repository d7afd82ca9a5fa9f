// Copyright fencegate authors.
//
// TransactionTracker: where a session's transactions begin, as the port
// sends its client's statements upstream, so that the fence call goes first
// in each. It follows PostgreSQL's rules for a session:
//
// - outside a transaction, a statement begins an implicit transaction that
//   lasts to the end of its Query string, or to the next Sync in the
//   extended protocol, unless a COMMIT or ROLLBACK ends it first; the fence
//   goes before that statement;
// - BEGIN (START TRANSACTION) outside a transaction begins a block; the
//   fence goes right after it. Inside an implicit transaction BEGIN turns it
//   into the block, already fenced;
// - COMMIT and ROLLBACK end the transaction; with AND CHAIN a new one begins
//   at once, and the fence goes right after;
// - a ReadyForQuery that ends everything the server owed settles where the
//   session is, whatever was predicted.
//
// Predicting from the statements sent, rather than waiting for each
// ReadyForQuery, lets a client pipeline its batches.
//
// Thread safety: none; one session's strand uses it.

#ifndef PGPORT_TRANSACTION_TRACKER_H_
#define PGPORT_TRANSACTION_TRACKER_H_

#include "pgwire/backend.h"
#include "postgres/session_sql.h"

namespace fencegate::pgport {

class TransactionTracker {
 public:
  enum class State { kIdle, kImplicit, kBlock };

  // `statement` is about to be sent: true if it begins a transaction, and
  // the fence must go before it.
  bool BeginsBefore(const postgres::SessionStatement& statement);
  // `statement` was just sent: true if a transaction begins right after
  // it, and the fence must go next.
  bool BeginsAfter(const postgres::SessionStatement& statement);
  // The end of a Query string, or a Sync.
  void EndOfBatch();
  // A ReadyForQuery that ended everything owed.
  void Settle(pgwire::TransactionStatus status);

  State state() const { return state_; }
  bool idle() const { return state_ == State::kIdle; }

 private:
  State state_ = State::kIdle;
};

}  // namespace fencegate::pgport

#endif  // PGPORT_TRANSACTION_TRACKER_H_
