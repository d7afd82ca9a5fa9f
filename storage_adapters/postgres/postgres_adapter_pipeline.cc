// Copyright fencegate authors.
//
// PostgresAdapter, one batch on one connection: sending each write's
// pipeline (fence upsert, statements, sync) and reading its results back.
// The queue, the sender threads and the timer are in postgres_adapter.cc.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "fencing/stale_token.h"
#include "fencing/sync_point.h"
#include "storage_adapters/postgres/postgres_adapter.h"
#include "storage_adapters/postgres/sql_text.h"

namespace fencegate {
namespace {

using postgres::AddResult;
using postgres::ConnectionError;
using postgres::kFenceStatement;
using postgres::ParamText;
using postgres::PgResult;
using postgres::SqlErrorStatus;

// The fence upsert divides by zero when the stored token is higher: an
// error that aborts the pipeline before any statement runs, whatever
// constraints the fence table has.
constexpr std::string_view kStaleSqlState = "22012";

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
  while (sent < batch.size() && SendWrite(c, *batch[sent])) ++sent;
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
                                size_t sent) {
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
        p->status = absl::UnavailableError(
            absl::StrCat("postgres: connection closed before the write ran: ",
                         ConnectionError(c)));
        p->retryable = true;
      } else {
        p->status = absl::UnavailableError(absl::StrCat(
            "postgres: connection lost after the write was sent, outcome "
            "unknown (retry with the same token): ",
            ConnectionError(c)));
      }
      continue;
    }
    ending = ReadWrite(c, p);
  }
  if (ending != Ending::kSynced) {
    l.Discard();
    lease->reset();
    for (PendingWrite* p : batch) {
      if (p->stale)
        p->status = StaleTokenError(p->target->domain, p->target->token, 0);
    }
    return;
  }
  bool usable = true;
  if (PQexitPipelineMode(c) != 1) {
    // Every result was read, so this cannot happen; the outcomes are known,
    // but do not reuse a connection in a state nobody expects.
    usable = false;
  }
  if (PQtransactionStatus(c) != PQTRANS_IDLE) {
    // A statement opened a transaction block (Validate refuses every
    // spelling it knows), and the writes after it ran inside that block:
    // closing the connection rolls the block back, but which writes had
    // committed before it is not known here.
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
  for (size_t i = 0; i < sent; ++i) {
    if (batch[i]->stale) {
      // The database's token can only be read on an idle connection.
      batch[i]->status = usable ? StaleError(c, *batch[i]->target)
                                : StaleTokenError(batch[i]->target->domain,
                                                  batch[i]->target->token, 0);
    }
  }
  if (!usable) {
    l.Discard();
    lease->reset();
  }
}

bool PostgresAdapter::SendWrite(PGconn* c, const PendingWrite& w) {
  const std::string domain(w.target->domain);
  const std::string token = absl::StrCat(w.target->token);
  const char* fence_params[2] = {domain.c_str(), token.c_str()};
  if (PQsendQueryPrepared(c, kFenceStatement, 2, fence_params, nullptr, nullptr,
                          0) != 1) {
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
  FENCEGATE_SYNC_POINT("PostgresAdapter::Apply:BeforeCommit");
  return PQpipelineSync(c) == 1;
}

PostgresAdapter::Ending PostgresAdapter::ReadWrite(PGconn* c, PendingWrite* w) {
  // One result per query. After the first error the server skips the rest
  // (PIPELINE_ABORTED) and rolls the transaction back at the sync.
  const Operations& ops = *w->ops;
  bool failed = false;
  int64_t rows_left = options_.max_result_rows;
  for (int q = 0; q <= ops.size(); ++q) {
    PgResult r(PQgetResult(c));
    const ExecStatusType status =
        r == nullptr ? PGRES_FATAL_ERROR : PQresultStatus(r.get());
    if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK ||
        status == PGRES_EMPTY_QUERY) {
      if (q > 0) {
        AddResult(r.get(), &rows_left, w->results->Add()->mutable_sql());
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
        if (state == nullptr) {
          w->status = absl::UnavailableError(absl::StrCat(
              "postgres: connection lost after the write was sent, outcome "
              "unknown (retry with the same token): ",
              ConnectionError(c)));
          return Ending::kLost;
        }
        w->status = SqlErrorStatus(state, PQresultErrorMessage(r.get()), q - 1);
        w->retryable = true;
        return Ending::kEndedBeforeSync;
      }
      if (!failed) {
        failed = true;
        if (q == 0 && std::string_view(state) == kStaleSqlState) {
          w->stale = true;
        } else {
          w->status =
              SqlErrorStatus(state, PQresultErrorMessage(r.get()), q - 1);
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
      w->status = absl::UnavailableError(absl::StrCat(
          "postgres: connection lost after the write was sent, outcome "
          "unknown (retry with the same token): ",
          ConnectionError(c)));
    }
    return Ending::kLost;
  }
  if (failed) w->results->Clear();
  return Ending::kSynced;
}

absl::Status PostgresAdapter::StaleError(PGconn* c, const WriteTarget& target) {
  const std::string domain(target.domain);
  const char* params[1] = {domain.c_str()};
  PgResult r(PQexecParams(c, fence_select_sql_.c_str(), 1, nullptr, params,
                          nullptr, nullptr, 0));
  uint64_t highest = 0;
  if (r != nullptr && PQresultStatus(r.get()) == PGRES_TUPLES_OK &&
      PQntuples(r.get()) == 1) {
    // A bigint always parses; 0 would read as "unknown" in the error.
    if (!absl::SimpleAtoi(PQgetvalue(r.get(), 0, 0), &highest)) highest = 0;
  }
  return StaleTokenError(target.domain, target.token, highest);
}

}  // namespace fencegate
