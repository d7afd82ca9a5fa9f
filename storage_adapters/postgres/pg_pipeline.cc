// Copyright fencegate authors.

#include "storage_adapters/postgres/pg_pipeline.h"

#include <openssl/evp.h>

#include <algorithm>
#include <string_view>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "fencegate/common/seq_out_of_order.h"
#include "fencegate/common/stale_token.h"
#include "fencegate/common/sync_point.h"
#include "postgres/fence_schema.h"
#include "postgres/fence_token.h"
#include "postgres/session_reset.h"

namespace fencegate::postgres {
namespace {

// The session reset after a dirty write: the session as a new connection
// has it, but for the startup packet's settings (statement_timeout,
// search_path), which are reset values. First in its own segment, where
// PostgreSQL allows it.
constexpr char kResetSql[] = "DISCARD ALL";

// Hex SHA-256 of a Write's path and operations: what its seq names, so
// that a retry with another payload is told from the write it repeats.
std::string WriteHash(const WriteTarget& target, const Operations& ops) {
  std::string input(target.path);
  for (const v1::Operation& op : ops) {
    const std::string bytes = op.SerializeAsString();
    absl::StrAppend(&input, std::string(1, '\0'), bytes.size(), ":", bytes);
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_Digest(input.data(), input.size(), digest, &size, EVP_sha256(),
                 nullptr) != 1) {
    return std::string();  // no hash: the retry is taken as the write
  }
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), size));
}

bool SendSimple(PGconn* c, const char* sql) {
  return PQsendQueryParams(c, sql, 0, nullptr, nullptr, nullptr, nullptr, 0) ==
         1;
}

}  // namespace

// The connection broke after the write was sent, with no error before it.
absl::Status PgPipeline::LostAfterSent(PGconn* c) {
  return absl::UnavailableError(absl::StrCat(
      "postgres: connection lost after the write was sent, outcome unknown "
      "(retry with the same token): ",
      ConnectionError(c)));
}

// The server ended the session before it ran any of the write.
absl::Status PgPipeline::ClosedBeforeRan(PGconn* c) {
  return absl::UnavailableError(
      absl::StrCat("postgres: connection closed before the write ran: ",
                   ConnectionError(c)));
}

PgPipeline::PgPipeline(PgConnection* conn, const Settings* settings)
    : conn_(conn), settings_(settings) {}

size_t PgPipeline::Send(const std::vector<QueuedWrite*>& batch) {
  batch_ = batch;
  sent_ = 0;
  reset_ = false;
  usable_ = true;
  PGconn* c = conn_->raw();
  if (PQenterPipelineMode(c) != 1) {
    for (QueuedWrite* w : batch_) {
      w->status = absl::InternalError(absl::StrCat(
          "postgres: cannot enter pipeline mode: ", ConnectionError(c)));
    }
    usable_ = false;
    phase_ = Phase::kFinished;
    return 0;
  }
  fenced_.assign(batch_.size(), Fenced::kCall);
  kept_.assign(batch_.size(), false);
  TakeReleases();
  rel_ = 0;
  // One round trip for the batch; an error in one write rolls back that
  // write only.
  if (SendReleases()) {
    while (sent_ < batch_.size() && SendWrite(*batch_[sent_], &fenced_[sent_]))
      ++sent_;
  }
  if (sent_ > 0 && batch_[sent_ - 1]->dirty) {
    // If it fails, the dirty write's sync went out whole: its outcome will
    // be read, the reset's failure shows there, and the connection is
    // dropped.
    reset_ = SendReset();
    reset_ok_ = reset_;
  }
  for (size_t i = sent_; i < batch_.size(); ++i) {
    // Its sync never reached the server whole, so nothing was committed.
    batch_[i]->status = absl::UnavailableError(absl::StrCat(
        "postgres: sending the write failed: ", ConnectionError(c)));
    batch_[i]->retryable = PQstatus(c) == CONNECTION_BAD;
    batch_[i]->results->Clear();
  }
  if (sent_ == 0) {
    usable_ = false;
    phase_ = Phase::kFinished;
    return 0;
  }
  write_ = 0;
  if (releases_.empty()) {
    BeginWrite();
  } else {
    phase_ = Phase::kReleaseResult;
  }
  return sent_;
}

int PgPipeline::Flush() { return PQflush(conn_->raw()); }

bool PgPipeline::SendWrite(const QueuedWrite& w, Fenced* fenced) {
  PGconn* c = conn_->raw();
  if (w.dirty && !SendSimple(c, "BEGIN")) return false;
  const std::string domain(w.target->domain);
  const std::string token = absl::StrCat(w.target->token);
  const char* secret = conn_->secret().c_str();
  if (w.target->seq == 0 && conn_->armed()) {
    // The connection's shared lock on the domain keeps the row at the
    // token: nothing to send. Otherwise fence_hold() checks and holds.
    if (conn_->held().Use(domain, w.target->token)) {
      *fenced = Fenced::kHeld;
    } else {
      *fenced = Fenced::kHolding;
      const char* params[3] = {domain.c_str(), token.c_str(), secret};
      if (PQsendQueryPrepared(c, conn_->fence_hold_statement().c_str(), 3,
                              params, nullptr, nullptr, 0) != 1) {
        return false;
      }
    }
  } else if (w.target->seq == 0) {
    const char* fence_params[2] = {domain.c_str(), token.c_str()};
    if (PQsendQueryPrepared(c, conn_->fence_statement().c_str(), 2,
                            fence_params, nullptr, nullptr, 0) != 1) {
      return false;
    }
  } else {
    const std::string seq = absl::StrCat(w.target->seq);
    const std::string hash = WriteHash(*w.target, *w.ops);
    const char* fence_params[5] = {domain.c_str(), token.c_str(), seq.c_str(),
                                   hash.c_str(), secret};
    // An armed connection's fence_seq() takes its secret.
    const int sent =
        conn_->armed()
            ? PQsendQueryPrepared(c, conn_->fence_seq_armed_statement().c_str(),
                                  5, fence_params, nullptr, nullptr, 0)
        : conn_->seq_prepared()
            ? PQsendQueryPrepared(c, conn_->fence_seq_statement().c_str(), 4,
                                  fence_params, nullptr, nullptr, 0)
            : PQsendQueryParams(c, settings_->fence_seq_sql.c_str(), 4, nullptr,
                                fence_params, nullptr, nullptr, 0);
    if (sent != 1) return false;
  }
  std::vector<std::string> texts;
  std::vector<const char*> params;
  for (const v1::Operation& op : *w.ops) {
    const v1::SqlStatement& stmt = op.sql();
    texts.clear();
    params.clear();
    texts.reserve(stmt.params_size());
    for (const v1::SqlValue& v : stmt.params()) {
      texts.push_back(ParamText(v));
      params.push_back(v.kind_case() == v1::SqlValue::kNull
                           ? nullptr
                           : texts.back().c_str());
    }
    if (PQsendQueryParams(c, stmt.sql().c_str(), stmt.params_size(), nullptr,
                          params.data(), nullptr, nullptr, 0) != 1) {
      return false;
    }
  }
  if (w.dirty && !SendSimple(c, "COMMIT")) return false;
  FENCEGATE_SYNC_POINT("PostgresAdapter::Apply:BeforeCommit");
  return PQpipelineSync(c) == 1;
}

bool PgPipeline::SendReset() {
  PGconn* c = conn_->raw();
  // DISCARD ALL drops fence_seq()'s statement too: later Writes with a seq
  // send its text. It also ends the arm and every hold (its advisory locks
  // go): the connection's Writes call fence() from now on.
  conn_->set_seq_prepared(false);
  conn_->Disarm();
  // ROLLBACK ends the block of a dirty Write that failed inside it (and is
  // only a warning after one that committed), so that a failed dirty Write
  // costs no new connection; then the reset, first in a segment of its own.
  // random() is seeded again after it (session_reset.h).
  return SendSimple(c, "ROLLBACK") && PQpipelineSync(c) == 1 &&
         SendSimple(c, kResetSql) && SendSimple(c, ReseedSql().c_str()) &&
         PQsendPrepare(c, conn_->fence_statement().c_str(),
                       settings_->fence_call_sql.c_str(), 2, nullptr) == 1 &&
         PQpipelineSync(c) == 1;
}

void PgPipeline::BeginWrite() {
  if (write_ >= sent_) {
    if (reset_) {
      phase_ = Phase::kResetResult;
      q_ = 0;
    } else {
      Finish(Ending::kSynced);
    }
    return;
  }
  const QueuedWrite& w = *batch_[write_];
  // One result per query: [BEGIN], the fence call, the statements,
  // [COMMIT]. After the first error the server skips the rest
  // (PIPELINE_ABORTED) and rolls the transaction back at the sync (or
  // leaves a BEGIN's block aborted, for the caller to drop).
  has_fence_ = fenced_[write_] != Fenced::kHeld;
  fence_query_ = (w.dirty ? 1 : 0) + (has_fence_ ? 1 : 0) - 1;
  queries_ = fence_query_ + 1 + w.ops->size() + (w.dirty ? 1 : 0);
  // With nothing before them, the operations start at once: the first one's
  // rows are read one at a time too (NextQuery() does it for the others).
  if (fence_query_ < 0) (void)PQsetSingleRowMode(conn_->raw());
  commit_query_ = w.dirty ? queries_ - 1 : -1;
  failed_ = false;
  out_ = nullptr;
  budget_ =
      ResultBudget{settings_->max_result_rows, settings_->max_result_bytes,
                   w.target->take_result_memory};
  q_ = 0;
  phase_ = Phase::kResult;
}

void PgPipeline::NextQuery() {
  ++q_;
  if (q_ == queries_) {
    phase_ = Phase::kSync;
    return;
  }
  phase_ = Phase::kResult;
  out_ = nullptr;
  const bool is_op =
      q_ > fence_query_ && q_ <= fence_query_ + batch_[write_]->ops->size();
  // A statement's rows are read one at a time, so that a huge result costs
  // the memory of one row, not of all of them; the rows past the cap are
  // read and dropped. Set before anything of the query is parsed.
  if (is_op) (void)PQsetSingleRowMode(conn_->raw());
}

PgPipeline::Progress PgPipeline::Read(bool cancelled) {
  PGconn* c = conn_->raw();
  // A failure shows in the results: PQisBusy() is false on a broken
  // connection, and PQgetResult() reports it.
  (void)PQconsumeInput(c);
  while (phase_ != Phase::kFinished) {
    if (PQisBusy(c)) return Progress::kNeedInput;
    Feed(PgResult(PQgetResult(c)), cancelled);
  }
  return Progress::kDone;
}

void PgPipeline::NoteRow(const PGresult* r) {
  int64_t bytes = 0;
  for (int col = 0; col < PQnfields(r); ++col) bytes += PQgetlength(r, 0, col);
  // libpq's input buffer grew to hold the whole row, and never shrinks:
  // the connection goes with its batch rather than back to the pool.
  if (bytes > kKeptRowBytes) usable_ = false;
}

void PgPipeline::Feed(PgResult r, bool cancelled) {
  PGconn* c = conn_->raw();
  switch (phase_) {
    case Phase::kResult: {
      QueuedWrite* w = batch_[write_];
      const ExecStatusType status =
          r == nullptr ? PGRES_FATAL_ERROR : PQresultStatus(r.get());
      const bool is_op =
          q_ > fence_query_ && q_ <= fence_query_ + w->ops->size();
      if (status == PGRES_SINGLE_TUPLE) {
        NoteRow(r.get());
        if (!failed_) {
          if (out_ == nullptr) out_ = w->results->Add()->mutable_sql();
          AddRows(r.get(), &budget_, out_);
        }
        return;  // More rows, or the end of them.
      }
      if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK ||
          status == PGRES_EMPTY_QUERY) {
        if (has_fence_ && q_ == fence_query_ &&
            fenced_[write_] == Fenced::kHolding && status == PGRES_TUPLES_OK &&
            PQntuples(r.get()) == 1) {
          // fence_hold(): true if the connection holds the domain now.
          kept_[write_] = std::string_view(PQgetvalue(r.get(), 0, 0)) == "t";
        }
        if (is_op && !failed_) {
          if (out_ == nullptr) out_ = w->results->Add()->mutable_sql();
          AddRows(r.get(), &budget_, out_);
          SetRowsAffected(r.get(), out_);
        }
      } else if (status == PGRES_PIPELINE_ABORTED) {
        // Skipped after an earlier error.
      } else if (status == PGRES_FATAL_ERROR) {
        if (!OnError(r.get(), cancelled)) return;
      } else {
        // Nothing Validate lets through answers like this (COPY would);
        // what the server does with the rest is unknown: report it so.
        w->results->Clear();
        w->status = absl::InternalError(
            absl::StrCat("postgres: unexpected result ", PQresStatus(status),
                         "; connection dropped, outcome unknown"));
        Finish(Ending::kLost);
        return;
      }
      phase_ = Phase::kEnd;
      return;
    }
    case Phase::kEnd:
      NextQuery();  // Whatever it is, query q_ is over.
      return;
    case Phase::kSync: {
      QueuedWrite* w = batch_[write_];
      if (r == nullptr || PQresultStatus(r.get()) != PGRES_PIPELINE_SYNC) {
        w->results->Clear();
        if (!failed_) w->status = LostAfterSent(c);
        Finish(Ending::kLost);
        return;
      }
      if (failed_) w->results->Clear();
      if (w->replayed && w->status.ok() && w->target->replayed != nullptr) {
        *w->target->replayed = true;
      }
      ++write_;
      BeginWrite();
      return;
    }
    case Phase::kReleaseResult:
    case Phase::kReleaseEnd:
    case Phase::kReleaseSync:
      FeedRelease(std::move(r));
      return;
    case Phase::kResetResult:
      if (r == nullptr) {
        reset_ok_ = false;
        Finish(Ending::kSynced);
        return;
      }
      // The reseed (query 2) returns a row; the others, none.
      if (PQresultStatus(r.get()) !=
          (q_ == 2 ? PGRES_TUPLES_OK : PGRES_COMMAND_OK)) {
        reset_ok_ = false;
      }
      phase_ = Phase::kResetEnd;
      return;
    case Phase::kResetEnd:
      // A sync after ROLLBACK, and after the reset, the reseed and the
      // prepare.
      if (q_ == 0 || q_ == 3) {
        phase_ = Phase::kResetSync;
      } else {
        ++q_;
        phase_ = Phase::kResetResult;
      }
      return;
    case Phase::kResetSync:
      if (r == nullptr || PQresultStatus(r.get()) != PGRES_PIPELINE_SYNC) {
        reset_ok_ = false;
        Finish(Ending::kSynced);
        return;
      }
      if (q_ == 3) {
        Finish(Ending::kSynced);
        return;
      }
      ++q_;
      phase_ = Phase::kResetResult;
      return;
    case Phase::kFinished:
      return;
  }
}

bool PgPipeline::OnError(const PGresult* r, bool cancelled) {
  PGconn* c = conn_->raw();
  QueuedWrite* w = batch_[write_];
  // The operation a result belongs to: -1 for BEGIN and the fence call,
  // the last one for COMMIT (where deferred constraints are checked).
  const int op_index = std::min(q_ - fence_query_ - 1, w->ops->size() - 1);
  const char* state =
      r == nullptr ? nullptr : PQresultErrorField(r, PG_DIAG_SQLSTATE);
  // FATAL or PANIC: the server ended the session while it ran query q_
  // (e.g. 57P01 on shutdown or pg_terminate_backend), so it ran nothing
  // after it. An ERROR, whatever its SQLSTATE (an 08xxx from dblink, say),
  // ends only its own write, and the server goes on to the next.
  const char* severity =
      r == nullptr ? nullptr
                   : PQresultErrorField(r, PG_DIAG_SEVERITY_NONLOCALIZED);
  const bool session_ended =
      severity != nullptr && (std::string_view(severity) == "FATAL" ||
                              std::string_view(severity) == "PANIC");
  if (state == nullptr || session_ended) {
    w->results->Clear();
    if (failed_) {  // Rolled back: its status is set.
      Finish(Ending::kLost);
      return false;
    }
    if (state == nullptr && q_ == 0 && conn_->ended_between_queries()) {
      // The server ended the session while idle, after the previous
      // write's sync: none of this one ran.
      w->status = ClosedBeforeRan(c);
      w->retryable = true;
      Finish(Ending::kEndedBeforeSync);
      return false;
    }
    if (q_ == commit_query_) {
      // The session ended during COMMIT: it may have committed (a
      // synchronous standby's wait, say). Never send it again.
      w->status = absl::UnavailableError(absl::StrCat(
          "postgres: connection lost during COMMIT, outcome unknown (retry "
          "with the same token if the write is idempotent): ",
          ConnectionError(c)));
      Finish(Ending::kLost);
      return false;
    }
    if (state == nullptr) {
      w->status = LostAfterSent(c);
      Finish(Ending::kLost);
      return false;
    }
    w->status = SqlErrorStatus(state, PQresultErrorMessage(r), op_index);
    w->retryable = true;
    Finish(Ending::kEndedBeforeSync);
    return false;
  }
  if (failed_) return true;
  failed_ = true;
  // fence() and fence_seq() put the database's token, or seq, in DETAIL.
  const char* detail = PQresultErrorField(r, PG_DIAG_MESSAGE_DETAIL);
  const std::string_view fence_state = has_fence_ && q_ == fence_query_
                                           ? std::string_view(state)
                                           : std::string_view();
  if (fence_state == kStaleSqlState) {
    w->stale = true;
    w->held = StaleHeldToken(kStaleSqlState, detail).value_or(0);
  } else if (fence_state == kSeqAppliedSqlState) {
    // Rolled back, having applied nothing: the earlier attempt did.
    w->replayed = true;
  } else if (fence_state == kSeqOtherWriteSqlState) {
    w->status = absl::FailedPreconditionError(absl::StrCat(
        "seq: seq ", w->target->seq, " of token ", w->target->token,
        " was recorded for another write (another path or operation): a seq "
        "names one write; nothing applied"));
  } else if (fence_state == kSeqOrderSqlState) {
    if (detail == nullptr || !absl::SimpleAtoi(detail, &w->later_seq)) {
      w->later_seq = 0;
    }
    w->status = SeqOutOfOrderError(w->target->domain, w->target->token,
                                   w->target->seq, w->later_seq);
  } else if (fence_state == "42883" && w->target->seq != 0) {
    w->status = absl::FailedPreconditionError(absl::StrCat(
        "postgres: the database's fence schema has no fence_seq() function: "
        "run fencectl pg-setup again to add (token, seq) to it "
        "(docs/postgres.md); nothing applied"));
  } else if (cancelled && std::string_view(state) == "57014") {
    w->status = absl::DeadlineExceededError(absl::StrCat(
        op_index >= 0 ? absl::StrCat("ops[", op_index, "]")
                      : std::string("fence"),
        ": cancelled by the gateway after running past the route's "
        "statement_timeout_ms (",
        settings_->statement_timeout_ms,
        " ms, plus 1 s) or the call's deadline, or at shutdown; rolled back, "
        "nothing applied"));
  } else {
    w->status = SqlErrorStatus(state, PQresultErrorMessage(r), op_index);
  }
  return true;
}

void PgPipeline::Finish(Ending ending) {
  phase_ = Phase::kFinished;
  PGconn* c = conn_->raw();
  if (ending != Ending::kSynced) {
    usable_ = false;
    // The writes after the one that ended the batch.
    for (size_t i = write_ + 1; i < sent_; ++i) {
      QueuedWrite* w = batch_[i];
      w->results->Clear();
      if (ending == Ending::kEndedBeforeSync) {
        // The server ended the session while it ran an earlier write, so
        // it never ran this one.
        w->status = ClosedBeforeRan(c);
        w->retryable = true;
      } else {
        w->status = LostAfterSent(c);
      }
    }
  }
  write_ = sent_;
  for (size_t i = 0; i < sent_; ++i) {
    QueuedWrite* w = batch_[i];
    if (w->stale) {
      w->status = StaleTokenError(w->target->domain, w->target->token, w->held);
    }
  }
  if (ending != Ending::kSynced) return;
  if (reset_ && !reset_ok_) usable_ = false;
  NoteHolds();
  // The reset ended a dirty Write's aborted block, if it left one.
  if (PQexitPipelineMode(c) != 1) {
    // Every result was read, so this cannot happen; the outcomes are known,
    // but do not reuse a connection in a state nobody expects.
    usable_ = false;
  }
  const PGTransactionStatusType tx = PQtransactionStatus(c);
  QueuedWrite* last = batch_[sent_ - 1];
  if (tx == PQTRANS_INERROR && last->dirty && !last->status.ok()) {
    // The last write (dirty, always last in its batch) failed inside its
    // BEGIN: its block is aborted, nothing of it committed. Dropping the
    // connection ends the block; every outcome is known.
    usable_ = false;
  } else if (tx != PQTRANS_IDLE) {
    // A statement left a transaction open (Validate refuses every way it
    // knows), and the writes after it ran inside that block: closing the
    // connection rolls the block back, but which writes had committed
    // before it is not known here.
    usable_ = false;
    for (size_t i = 0; i < sent_; ++i) {
      batch_[i]->results->Clear();
      batch_[i]->status = absl::InternalError(
          "postgres: a statement left a transaction open (transaction "
          "control is not allowed); connection dropped, outcome unknown");
    }
  }
}

}  // namespace fencegate::postgres
