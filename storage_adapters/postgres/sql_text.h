// Copyright fencegate authors.
//
// SQL values and libpq results, for the PostgreSQL adapter: turning
// request values into libpq's text parameters and results into response
// messages, and SQL errors into absl::Status with a SqlError detail. Pure
// functions, safe from any thread.

#ifndef STORAGE_ADAPTERS_POSTGRES_SQL_TEXT_H_
#define STORAGE_ADAPTERS_POSTGRES_SQL_TEXT_H_

#include <libpq-fe.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "fencegate/v1/gateway.pb.h"

namespace fencegate::postgres {

// Frees a libpq result.
struct PgResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgResult = std::unique_ptr<PGresult, PgResultDeleter>;

// `v` in PostgreSQL's text input format ("" for NULL, which the caller
// sends as a null pointer).
std::string ParamText(const v1::SqlValue& v);

// `what` without trailing newlines and spaces.
std::string Trimmed(const char* what);

// The status code for a SQLSTATE (docs/postgres.md lists them).
absl::StatusCode CodeForSqlState(const std::string& state);

// The status for a SQL error of operation `op_index` (-1: the fence
// table), with a fencegate.v1.SqlError detail.
absl::Status SqlErrorStatus(const std::string& state, const char* message,
                            int op_index);

// libpq's last error on `c`, or "connection closed".
std::string ConnectionError(PGconn* c);

// What is left of a Write's result cap.
struct ResultBudget {
  int64_t rows_left = 0;
  int64_t bytes_left = 0;  // Field bytes, with column names.
  // The gateway's memory budget for kept rows (WriteTarget's
  // take_result_memory); null: none.
  std::function<bool(size_t)>* take_memory = nullptr;
};

// Appends `r`'s rows that fit in *budget to `out` (then truncated),
// counting it down, and its columns if `out` has none yet. For a whole
// result, or one row of a result read row by row (PGRES_SINGLE_TUPLE).
void AddRows(const PGresult* r, ResultBudget* budget, v1::SqlResult* out);

// Sets `out`'s row count from `r`'s command tag (the last result of a
// statement).
void SetRowsAffected(const PGresult* r, v1::SqlResult* out);

}  // namespace fencegate::postgres

#endif  // STORAGE_ADAPTERS_POSTGRES_SQL_TEXT_H_
