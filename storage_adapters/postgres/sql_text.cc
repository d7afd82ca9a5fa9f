// Copyright fencegate authors.

#include "storage_adapters/postgres/sql_text.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "fencegate/v1/errors.pb.h"

namespace fencegate::postgres {
namespace {

constexpr char kSqlErrorTypeUrl[] = "type.googleapis.com/fencegate.v1.SqlError";

}  // namespace

std::string ParamText(const v1::SqlValue& v) {
  switch (v.kind_case()) {
    case v1::SqlValue::kText:
      return v.text();
    case v1::SqlValue::kInt64:
      return absl::StrCat(v.int64());
    case v1::SqlValue::kFloat64:
      if (std::isnan(v.float64())) return "NaN";
      if (std::isinf(v.float64())) {
        return v.float64() > 0 ? "Infinity" : "-Infinity";
      }
      return absl::StrFormat("%.17g", v.float64());
    case v1::SqlValue::kBoolean:
      return v.boolean() ? "true" : "false";
    case v1::SqlValue::kBytes:
      // bytea's hex input format.
      return absl::StrCat("\\x", absl::BytesToHexString(v.bytes()));
    default:
      return "";
  }
}

std::string Trimmed(const char* what) {
  std::string s = what;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

absl::StatusCode CodeForSqlState(const std::string& state) {
  if (state.rfind("23", 0) == 0) return absl::StatusCode::kFailedPrecondition;
  if (state == "57014") return absl::StatusCode::kDeadlineExceeded;
  if (state == "40001" || state == "40P01") return absl::StatusCode::kAborted;
  if (state.rfind("08", 0) == 0 || state == "57P01" || state == "57P02" ||
      state == "57P03") {
    return absl::StatusCode::kUnavailable;
  }
  if (state.rfind("53", 0) == 0) return absl::StatusCode::kResourceExhausted;
  if (state.rfind("XX", 0) == 0 || state.rfind("58", 0) == 0) {
    return absl::StatusCode::kInternal;
  }
  return absl::StatusCode::kInvalidArgument;
}

absl::Status SqlErrorStatus(const std::string& state, const char* message,
                            int op_index) {
  std::string where =
      op_index >= 0 ? absl::StrCat("ops[", op_index, "]") : "fence table";
  absl::Status status(
      CodeForSqlState(state),
      absl::StrCat(where, ": postgres error SQLSTATE ",
                   state.empty() ? "?????" : state, ": ", Trimmed(message)));
  v1::SqlError detail;
  detail.set_sqlstate(state);
  detail.set_message(Trimmed(message));
  detail.set_op_index(op_index);
  status.SetPayload(kSqlErrorTypeUrl, absl::Cord(detail.SerializeAsString()));
  return status;
}

std::string ConnectionError(PGconn* c) {
  const char* m = c == nullptr ? nullptr : PQerrorMessage(c);
  return m == nullptr || *m == '\0' ? "connection closed" : Trimmed(m);
}

void AddRows(const PGresult* r, ResultBudget* budget, v1::SqlResult* out) {
  const int columns = PQnfields(r);
  if (out->columns_size() == 0) {
    for (int col = 0; col < columns; ++col) {
      out->add_columns(PQfname(r, col));
      budget->bytes_left -= static_cast<int64_t>(out->columns(col).size());
    }
  }
  const int rows = PQntuples(r);
  for (int row = 0; row < rows; ++row) {
    int64_t bytes = 0;
    for (int col = 0; col < columns; ++col) bytes += PQgetlength(r, row, col);
    if (budget->rows_left <= 0 || bytes > budget->bytes_left ||
        (budget->take_memory != nullptr &&
         !(*budget->take_memory)(static_cast<size_t>(bytes)))) {
      out->set_truncated(true);
      budget->rows_left = 0;  // Later results stop too.
      break;
    }
    --budget->rows_left;
    budget->bytes_left -= bytes;
    v1::SqlRow* out_row = out->add_rows();
    for (int col = 0; col < columns; ++col) {
      v1::SqlValue* v = out_row->add_fields();
      if (PQgetisnull(r, row, col)) {
        v->set_null(true);
      } else {
        v->set_text(std::string(PQgetvalue(r, row, col),
                                static_cast<size_t>(PQgetlength(r, row, col))));
      }
    }
  }
}

void SetRowsAffected(const PGresult* r, v1::SqlResult* out) {
  uint64_t affected = 0;
  if (!absl::SimpleAtoi(PQcmdTuples(const_cast<PGresult*>(r)), &affected)) {
    affected = 0;  // Empty for statements that report no row count.
  }
  out->set_rows_affected(affected);
}

}  // namespace fencegate::postgres
