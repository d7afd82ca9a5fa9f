// Copyright fencegate authors.
//
// PgPipeline, the route's held fence (held_domains.h): the releases a
// connection owes, sent and read before a batch's Writes, and what the
// connection holds once the batch is read.

#include <string_view>
#include <utility>

#include "storage_adapters/postgres/pg_pipeline.h"

namespace fencegate::postgres {

void PgPipeline::TakeReleases() {
  if (conn_->armed()) {
    // A domain this connection holds at another token than a Write's is
    // given up first: a raise never waits for its own backend's lock, so
    // the database refuses one from a holder (55000).
    HeldDomains& held = conn_->held();
    for (const QueuedWrite* w : batch_) {
      if (held.Holds(w->target->domain) &&
          !held.Use(w->target->domain, w->target->token)) {
        held.Release(w->target->domain);
      }
    }
  }
  releases_ = conn_->held().TakeReleases();
}

bool PgPipeline::SendReleases() {
  PGconn* c = conn_->raw();
  for (const std::string& domain : releases_) {
    const char* params[2] = {domain.c_str(), conn_->secret().c_str()};
    if (PQsendQueryParams(c, settings_->release_sql.c_str(), 2, nullptr, params,
                          nullptr, nullptr, 0) != 1 ||
        PQpipelineSync(c) != 1) {
      return false;
    }
  }
  return true;
}

void PgPipeline::FeedRelease(PgResult r) {
  switch (phase_) {
    case Phase::kReleaseResult: {
      if (r == nullptr) {
        // The server ended the session while idle, before the batch: none
        // of its Writes ran.
        EndInReleases(/*closed=*/conn_->ended_between_queries());
        return;
      }
      const char* severity =
          PQresultErrorField(r.get(), PG_DIAG_SEVERITY_NONLOCALIZED);
      if (severity != nullptr && (std::string_view(severity) == "FATAL" ||
                                  std::string_view(severity) == "PANIC")) {
        EndInReleases(/*closed=*/true);
        return;
      }
      // A release that failed may leave the domain held: the connection
      // goes after this batch, and its locks with it.
      if (PQresultStatus(r.get()) != PGRES_TUPLES_OK) usable_ = false;
      phase_ = Phase::kReleaseEnd;
      return;
    }
    case Phase::kReleaseEnd:
      phase_ = Phase::kReleaseSync;
      return;
    case Phase::kReleaseSync:
      if (r == nullptr || PQresultStatus(r.get()) != PGRES_PIPELINE_SYNC) {
        EndInReleases(/*closed=*/false);
        return;
      }
      if (++rel_ < releases_.size()) {
        phase_ = Phase::kReleaseResult;
      } else {
        BeginWrite();
      }
      return;
    default:
      return;
  }
}

void PgPipeline::EndInReleases(bool closed) {
  PGconn* c = conn_->raw();
  // Finish() reports the Writes after write_; the first one is set here.
  write_ = 0;
  QueuedWrite* first = batch_[0];
  first->results->Clear();
  if (closed) {
    first->status = ClosedBeforeRan(c);
    first->retryable = true;
    Finish(Ending::kEndedBeforeSync);
  } else {
    first->status = LostAfterSent(c);
    Finish(Ending::kLost);
  }
}

void PgPipeline::NoteHolds() {
  // A reset (DISCARD ALL) gave every hold up: Disarm() said so.
  if (reset_ || !conn_->armed()) return;
  for (size_t i = 0; i < sent_; ++i) {
    if (fenced_[i] != Fenced::kHolding) continue;
    const QueuedWrite& w = *batch_[i];
    if (w.status.ok()) {
      // Not kept after a raise; nothing was held before it (Send() gave an
      // older hold up first).
      if (kept_[i]) conn_->held().Held(w.target->domain, w.target->token);
    } else {
      // The hold, a session's lock, may have outlived the transaction
      // (the Write's SQL failed after fence_hold()), or the row it held
      // was raised in a transaction that rolled back: given up.
      conn_->held().Release(w.target->domain);
    }
  }
}

}  // namespace fencegate::postgres
