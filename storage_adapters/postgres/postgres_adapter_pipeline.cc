// Copyright fencegate authors.
//
// PostgresAdapter, one batch on one connection: sending each write's
// pipeline (the prepared fence call, the statements -- inside BEGIN ...
// COMMIT for a dirty write -- and a sync; after a dirty write, the session
// reset and its sync) and reading its results back, then checking the
// session's reported parameters against its baseline.
// The queue, the sender threads and the timer are in postgres_adapter.cc.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fencegate/common/stale_token.h"
#include "fencegate/common/sync_point.h"
#include "storage_adapters/postgres/fence_schema.h"
#include "storage_adapters/postgres/postgres_adapter.h"
#include "storage_adapters/postgres/sql_text.h"

namespace fencegate {
namespace {

using postgres::AddRows;
using postgres::ConnectionError;
using postgres::kStaleSqlState;
using postgres::ParamText;
using postgres::PgResult;
using postgres::ResultBudget;
using postgres::SetRowsAffected;
using postgres::SqlErrorStatus;

// The session reset after a dirty write: the session as a new connection
// has it, but for the startup packet's settings (statement_timeout,
// search_path), which are reset values. First in its own segment, where
// PostgreSQL allows it.
constexpr char kResetSql[] = "DISCARD ALL";

// The connection broke after the write was sent, with no error before it.
absl::Status LostAfterSent(PGconn* c) {
  return absl::UnavailableError(absl::StrCat(
      "postgres: connection lost after the write was sent, outcome unknown "
      "(retry with the same token): ",
      ConnectionError(c)));
}

// The server ended the session before it ran any of the write.
absl::Status ClosedBeforeRan(PGconn* c) {
  return absl::UnavailableError(
      absl::StrCat("postgres: connection closed before the write ran: ",
                   ConnectionError(c)));
}

}  // namespace

size_t PostgresAdapter::SendBatch(std::optional<PgConnectionPool::Lease>* lease,
                                  const std::vector<PendingWrite*>& batch) {
  size_t batch_size = batch.size();
  FENCEGATE_SYNC_POINT_ARG("PostgresAdapter::RunBatch:Start", &batch_size);
  if (lease->has_value() && !(*lease)->conn().IdleAndAlive()) {
    // The server ended the session since the last batch (or something is
    // left unread): use a fresh connection, as the pool would.
    (*lease)->Discard();
    lease->reset();
  }
  if (!lease->has_value()) {
    absl::StatusOr<PgConnectionPool::Lease> acquired = pool_.Acquire();
    if (!acquired.ok()) {
      for (PendingWrite* p : batch) p->status = acquired.status();
      return 0;
    }
    lease->emplace(*std::move(acquired));
  }
  PGconn* c = (*lease)->conn().raw();
  if (PQenterPipelineMode(c) != 1) {
    (*lease)->Discard();
    for (PendingWrite* p : batch) {
      p->status = absl::InternalError(absl::StrCat(
          "postgres: cannot enter pipeline mode: ", ConnectionError(c)));
    }
    lease->reset();
    return 0;
  }

  // Send every write: its fence upsert, its statements, and a sync that
  // ends its own implicit transaction. One round trip for the batch; an
  // error in one write rolls back that write only.
  size_t sent = 0;
  while (sent < batch.size() && SendWrite((*lease)->conn(), *batch[sent])) {
    ++sent;
  }
  if (sent > 0 && batch[sent - 1]->dirty && !SendReset((*lease)->conn())) {
    // The dirty write's sync went out whole: its outcome will be read; the
    // reset's failure shows there, and the connection is dropped.
  }
  for (size_t i = sent; i < batch.size(); ++i) {
    // Its sync never reached the server whole, so nothing was committed.
    batch[i]->status = absl::UnavailableError(absl::StrCat(
        "postgres: sending the write failed: ", ConnectionError(c)));
    batch[i]->retryable = PQstatus(c) == CONNECTION_BAD;
    batch[i]->results->Clear();
  }
  return sent;
}

void PostgresAdapter::ReadBatch(std::optional<PgConnectionPool::Lease>* lease,
                                const std::vector<PendingWrite*>& batch,
                                size_t sent,
                                postgres::StatementWatchdog::Watch* watch) {
  PgConnectionPool::Lease& l = **lease;
  PGconn* c = l.conn().raw();
  // Results come back in order, each write's ending with its sync.
  Ending ending = Ending::kSynced;
  for (size_t i = 0; i < sent; ++i) {
    PendingWrite* p = batch[i];
    if (ending != Ending::kSynced) {
      p->results->Clear();
      if (ending == Ending::kEndedBeforeSync) {
        // The server ended the session while it ran an earlier write, so
        // it never ran this one.
        p->status = ClosedBeforeRan(c);
        p->retryable = true;
      } else {
        p->status = LostAfterSent(c);
      }
      continue;
    }
    // Its limit runs from here: the writes before it are done.
    watch->Progress(p->target->deadline);
    ending = ReadWrite(l.conn(), p, *watch);
  }
  if (ending != Ending::kSynced) {
    l.Discard();
    lease->reset();
    for (PendingWrite* p : batch) {
      if (p->stale) {
        p->status =
            StaleTokenError(p->target->domain, p->target->token, p->held);
      }
    }
    return;
  }
  bool usable = true;
  if (sent > 0 && batch[sent - 1]->dirty && !ReadReset(c)) usable = false;
  // The reset ended a dirty Write's aborted block, if it left one.
  if (PQexitPipelineMode(c) != 1) {
    // Every result was read, so this cannot happen; the outcomes are known,
    // but do not reuse a connection in a state nobody expects.
    usable = false;
  }
  for (size_t i = 0; i < sent; ++i) {
    if (batch[i]->stale) {
      batch[i]->status = StaleTokenError(
          batch[i]->target->domain, batch[i]->target->token, batch[i]->held);
    }
  }
  // No cancel is sent from here on; one sent already may still reach the
  // server: then do not reuse the connection.
  if (watch->Disarm()) usable = false;
  const PGTransactionStatusType tx = PQtransactionStatus(c);
  if (tx == PQTRANS_INERROR && sent > 0 && batch[sent - 1]->dirty &&
      !batch[sent - 1]->status.ok()) {
    // The last write (dirty, always last in its batch) failed inside its
    // BEGIN: its block is aborted, nothing of it committed. Dropping the
    // connection ends the block; every outcome is known.
    usable = false;
  } else if (tx != PQTRANS_IDLE) {
    // A statement left a transaction open (Validate refuses every way it
    // knows), and the writes after it ran inside that block: closing the
    // connection rolls the block back, but which writes had committed
    // before it is not known here.
    l.Discard();
    lease->reset();
    for (size_t i = 0; i < sent; ++i) {
      batch[i]->results->Clear();
      batch[i]->status = absl::InternalError(
          "postgres: a statement left a transaction open (transaction "
          "control is not allowed); connection dropped, outcome unknown");
    }
    return;
  }
  if (usable && !SessionUnchanged(l.conn(), batch, sent)) usable = false;
  if (!usable) {
    l.Discard();
    lease->reset();
  }
}

bool PostgresAdapter::SessionUnchanged(PgConnection& conn,
                                       const std::vector<PendingWrite*>& batch,
                                       size_t sent) {
  const std::string changed = conn.ChangedParameter();
  if (changed.empty()) return true;
  // A statement the classifier let through changed the session (a function
  // that sets a reported parameter, say): close the connection rather than
  // hand the change to the next Write. Once per connection, since it is
  // closed now.
  if (escapes_ != nullptr) escapes_->Increment();
  if (on_warning_) {
    std::vector<std::string> ids;
    for (size_t i = 0; i < sent; ++i) {
      ids.emplace_back(batch[i]->target->request_id.empty()
                           ? "-"
                           : std::string(batch[i]->target->request_id));
    }
    on_warning_(
        absl::StrCat("postgres: a Write changed its pooled session (", changed,
                     "); the connection was closed. request_ids of its batch: ",
                     absl::StrJoin(ids, ",")));
  }
  return false;
}

bool PostgresAdapter::SendReset(PgConnection& conn) {
  PGconn* c = conn.raw();
  // ROLLBACK ends the block of a dirty Write that failed inside it (and is
  // only a warning after one that committed), so that a failed dirty Write
  // costs no new connection; then the reset, first in a segment of its own.
  return PQsendQueryParams(c, "ROLLBACK", 0, nullptr, nullptr, nullptr, nullptr,
                           0) == 1 &&
         PQpipelineSync(c) == 1 &&
         PQsendQueryParams(c, kResetSql, 0, nullptr, nullptr, nullptr, nullptr,
                           0) == 1 &&
         PQsendPrepare(c, conn.fence_statement().c_str(),
                       fence_call_sql_.c_str(), 2, nullptr) == 1 &&
         PQpipelineSync(c) == 1;
}

bool PostgresAdapter::ReadReset(PGconn* c) {
  // Each query's result and its end; a sync after ROLLBACK, and after the
  // reset and the prepare.
  bool ok = true;
  for (int q = 0; q < 3; ++q) {
    PgResult r(PQgetResult(c));
    if (r == nullptr) return false;
    if (PQresultStatus(r.get()) != PGRES_COMMAND_OK) ok = false;
    PgResult end(PQgetResult(c));
    if (q == 0 || q == 2) {
      PgResult sync(PQgetResult(c));
      if (sync == nullptr ||
          PQresultStatus(sync.get()) != PGRES_PIPELINE_SYNC) {
        return false;
      }
    }
  }
  return ok;
}

bool PostgresAdapter::SendWrite(PgConnection& conn, const PendingWrite& w) {
  PGconn* c = conn.raw();
  if (w.dirty && PQsendQueryParams(c, "BEGIN", 0, nullptr, nullptr, nullptr,
                                   nullptr, 0) != 1) {
    return false;
  }
  const std::string domain(w.target->domain);
  const std::string token = absl::StrCat(w.target->token);
  const char* fence_params[2] = {domain.c_str(), token.c_str()};
  if (PQsendQueryPrepared(c, conn.fence_statement().c_str(), 2, fence_params,
                          nullptr, nullptr, 0) != 1) {
    return false;
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
  if (w.dirty && PQsendQueryParams(c, "COMMIT", 0, nullptr, nullptr, nullptr,
                                   nullptr, 0) != 1) {
    return false;
  }
  FENCEGATE_SYNC_POINT("PostgresAdapter::Apply:BeforeCommit");
  return PQpipelineSync(c) == 1;
}

PostgresAdapter::Ending PostgresAdapter::ReadWrite(
    PgConnection& conn, PendingWrite* w,
    const postgres::StatementWatchdog::Watch& watch) {
  PGconn* c = conn.raw();
  // One result per query: [BEGIN], the fence call, the statements,
  // [COMMIT]. After the first error the server skips the rest
  // (PIPELINE_ABORTED) and rolls the transaction back at the sync (or
  // leaves a BEGIN's block aborted, for the caller to drop).
  const Operations& ops = *w->ops;
  const int fence_query = w->dirty ? 1 : 0;
  const int queries = ops.size() + fence_query + 1 + (w->dirty ? 1 : 0);
  const int commit_query = w->dirty ? queries - 1 : -1;
  bool failed = false;
  ResultBudget budget{options_.max_result_rows, options_.max_result_bytes};
  for (int q = 0; q < queries; ++q) {
    // The operation a result belongs to: -1 for BEGIN and the fence call,
    // the last one for COMMIT (where deferred constraints are checked).
    const int op_index = std::min(q - fence_query - 1, ops.size() - 1);
    const bool is_op = q > fence_query && q <= fence_query + ops.size();
    // A statement's rows are read one at a time, so that a huge result
    // costs the memory of one row, not of all of them; the rows past the
    // cap are read and dropped.
    if (is_op) (void)PQsetSingleRowMode(c);
    PgResult r(PQgetResult(c));
    ExecStatusType status =
        r == nullptr ? PGRES_FATAL_ERROR : PQresultStatus(r.get());
    v1::SqlResult* out = nullptr;
    while (status == PGRES_SINGLE_TUPLE) {
      if (!failed) {
        if (out == nullptr) out = w->results->Add()->mutable_sql();
        AddRows(r.get(), &budget, out);
      }
      r.reset(PQgetResult(c));
      status = r == nullptr ? PGRES_FATAL_ERROR : PQresultStatus(r.get());
    }
    if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK ||
        status == PGRES_EMPTY_QUERY) {
      if (is_op && !failed) {
        if (out == nullptr) out = w->results->Add()->mutable_sql();
        AddRows(r.get(), &budget, out);
        SetRowsAffected(r.get(), out);
      }
    } else if (status == PGRES_PIPELINE_ABORTED) {
      // Skipped after an earlier error.
    } else if (status == PGRES_FATAL_ERROR) {
      const char* state = r == nullptr
                              ? nullptr
                              : PQresultErrorField(r.get(), PG_DIAG_SQLSTATE);
      // FATAL or PANIC: the server ended the session while it ran query q
      // (e.g. 57P01 on shutdown or pg_terminate_backend), so it ran nothing
      // after it. An ERROR, whatever its SQLSTATE (an 08xxx from dblink,
      // say), ends only its own write, and the server goes on to the next.
      const char* severity =
          r == nullptr
              ? nullptr
              : PQresultErrorField(r.get(), PG_DIAG_SEVERITY_NONLOCALIZED);
      const bool session_ended =
          severity != nullptr && (std::string_view(severity) == "FATAL" ||
                                  std::string_view(severity) == "PANIC");
      if (state == nullptr || session_ended) {
        w->results->Clear();
        if (failed) return Ending::kLost;  // Rolled back: w->status is set.
        if (state == nullptr && q == 0 && conn.ended_between_queries()) {
          // The server ended the session while idle, after the previous
          // write's sync: none of this one ran.
          w->status = ClosedBeforeRan(c);
          w->retryable = true;
          return Ending::kEndedBeforeSync;
        }
        if (q == commit_query) {
          // The session ended during COMMIT: it may have committed (a
          // synchronous standby's wait, say). Never send it again.
          w->status = absl::UnavailableError(absl::StrCat(
              "postgres: connection lost during COMMIT, outcome unknown "
              "(retry with the same token if the write is idempotent): ",
              ConnectionError(c)));
          return Ending::kLost;
        }
        if (state == nullptr) {
          w->status = LostAfterSent(c);
          return Ending::kLost;
        }
        w->status =
            SqlErrorStatus(state, PQresultErrorMessage(r.get()), op_index);
        w->retryable = true;
        return Ending::kEndedBeforeSync;
      }
      if (!failed) {
        failed = true;
        if (q == fence_query && std::string_view(state) == kStaleSqlState) {
          w->stale = true;
          // fence() puts the database's token in DETAIL.
          const char* detail =
              PQresultErrorField(r.get(), PG_DIAG_MESSAGE_DETAIL);
          if (detail == nullptr || !absl::SimpleAtoi(detail, &w->held)) {
            w->held = 0;
          }
        } else if (watch.cancelled() && std::string_view(state) == "57014") {
          w->status = absl::DeadlineExceededError(absl::StrCat(
              op_index >= 0 ? absl::StrCat("ops[", op_index, "]")
                            : std::string("fence"),
              ": cancelled by the gateway after running past the route's "
              "statement_timeout_ms (",
              options_.statement_timeout_ms,
              " ms, plus 1 s) or the call's deadline, or at shutdown; rolled "
              "back, nothing applied"));
        } else {
          w->status =
              SqlErrorStatus(state, PQresultErrorMessage(r.get()), op_index);
        }
      }
    } else {
      // Nothing Validate lets through answers like this (COPY would); what
      // the server does with the rest is unknown: report it so.
      w->results->Clear();
      w->status = absl::InternalError(
          absl::StrCat("postgres: unexpected result ", PQresStatus(status),
                       "; connection dropped, outcome unknown"));
      return Ending::kLost;
    }
    if (r != nullptr) PgResult end(PQgetResult(c));  // Ends query q.
  }
  PgResult sync(PQgetResult(c));
  if (sync == nullptr || PQresultStatus(sync.get()) != PGRES_PIPELINE_SYNC) {
    w->results->Clear();
    if (!failed) {
      w->status = LostAfterSent(c);
    }
    return Ending::kLost;
  }
  if (failed) w->results->Clear();
  return Ending::kSynced;
}

}  // namespace fencegate
