// Copyright fencegate authors.

#include "pgport/transaction_tracker.h"

namespace fencegate::pgport {

using postgres::SessionEffect;

bool TransactionTracker::BeginsBefore(
    const postgres::SessionStatement& statement) {
  if (statement.effect != SessionEffect::kStatement) return false;
  if (state_ != State::kIdle) return false;
  state_ = State::kImplicit;
  return true;
}

bool TransactionTracker::BeginsAfter(
    const postgres::SessionStatement& statement) {
  switch (statement.effect) {
    case SessionEffect::kBegin: {
      const bool begins = state_ == State::kIdle;
      state_ = State::kBlock;
      return begins;
    }
    case SessionEffect::kCommit:
    case SessionEffect::kRollback:
      // AND CHAIN outside a block is an error, and nothing begins.
      if (statement.chain && state_ == State::kBlock) return true;
      state_ = State::kIdle;
      return false;
    default:
      return false;
  }
}

void TransactionTracker::EndOfBatch() {
  if (state_ == State::kImplicit) state_ = State::kIdle;
}

void TransactionTracker::Settle(pgwire::TransactionStatus status) {
  state_ =
      status == pgwire::TransactionStatus::kIdle ? State::kIdle : State::kBlock;
}

}  // namespace fencegate::pgport
