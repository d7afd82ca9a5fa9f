// Copyright fencegate authors.

#include "storage_adapters/postgres/postgres_adapter.h"

#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "fencegate/v1/errors.pb.h"
#include "fencing/stale_token.h"
#include "fencing/sync_point.h"
#include "pqxx/pqxx"

namespace fencegate {
namespace {

constexpr size_t kMaxSqlBytes = 1 << 20;
constexpr int kMaxParams = 65535;
constexpr char kSqlErrorTypeUrl[] = "type.googleapis.com/fencegate.v1.SqlError";

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

absl::Status SqlErrorStatus(const pqxx::sql_error& e, int op_index) {
  const std::string& state = e.sqlstate();
  std::string where =
      op_index >= 0 ? absl::StrCat("ops[", op_index, "]") : "fence table";
  absl::Status status(
      CodeForSqlState(state),
      absl::StrCat(where, ": postgres error SQLSTATE ",
                   state.empty() ? "?????" : state, ": ", Trimmed(e.what())));
  v1::SqlError detail;
  detail.set_sqlstate(state);
  detail.set_message(Trimmed(e.what()));
  detail.set_op_index(op_index);
  status.SetPayload(kSqlErrorTypeUrl, absl::Cord(detail.SerializeAsString()));
  return status;
}

std::string QuoteTable(const std::string& table) {
  size_t dot = table.find('.');
  if (dot == std::string::npos) return absl::StrCat("\"", table, "\"");
  return absl::StrCat("\"", table.substr(0, dot), "\".\"",
                      table.substr(dot + 1), "\"");
}

}  // namespace

std::string FenceTableDdl(const std::string& table) {
  return absl::StrCat("CREATE TABLE IF NOT EXISTS ", QuoteTable(table),
                      " (domain text PRIMARY KEY,"
                      " token bigint NOT NULL CHECK (token > 0),"
                      " updated_at timestamptz NOT NULL DEFAULT now())");
}

PostgresAdapter::PostgresAdapter(PostgresAdapterOptions options)
    : options_(std::move(options)),
      fence_upsert_sql_(
          absl::StrCat("INSERT INTO ", QuoteTable(options_.fence_table),
                       " AS f (domain, token) VALUES ($1, $2::bigint)"
                       " ON CONFLICT (domain) DO UPDATE"
                       " SET token = EXCLUDED.token, updated_at = now()"
                       " WHERE f.token <= EXCLUDED.token RETURNING f.token")),
      fence_select_sql_(absl::StrCat("SELECT token FROM ",
                                     QuoteTable(options_.fence_table),
                                     " WHERE domain = $1")),
      pool_(options_.conninfo, options_.redacted_uri, options_.pool_size,
            absl::Milliseconds(options_.pool_wait_ms),
            [table = options_.fence_table,
             timeout = options_.statement_timeout_ms](pqxx::connection& c) {
              pqxx::nontransaction tx(c);
              tx.exec(absl::StrCat("SET statement_timeout = ", timeout));
              try {
                tx.exec(FenceTableDdl(table));
              } catch (const pqxx::unique_violation&) {
                // Another gateway created it at the same moment: fine.
              }
            }) {}

PostgresAdapter::~PostgresAdapter() = default;

absl::Status PostgresAdapter::Validate(const WriteTarget& target,
                                       const Operations& ops) const {
  if (target.token >
      static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat("token: ", target.token,
                     " does not fit PostgreSQL's bigint fence column (at most "
                     "9223372036854775807)"));
  }
  if (target.path.empty()) {
    return absl::InvalidArgumentError(
        "resource: name what is written after the route, e.g. \"db/jobs\"");
  }
  for (int i = 0; i < ops.size(); ++i) {
    if (ops[i].op_case() != v1::Operation::kSql) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ops[", i, "]: the postgres adapter takes sql operations only"));
    }
    const v1::SqlStatement& stmt = ops[i].sql();
    if (stmt.sql().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("ops[", i, "].sql: must not be empty"));
    }
    if (stmt.sql().size() > kMaxSqlBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ops[", i, "].sql: longer than ", kMaxSqlBytes, " bytes"));
    }
    if (stmt.params_size() > kMaxParams) {
      return absl::InvalidArgumentError(
          absl::StrCat("ops[", i, "].params: more than ", kMaxParams));
    }
    for (int p = 0; p < stmt.params_size(); ++p) {
      const v1::SqlValue& v = stmt.params(p);
      if (v.kind_case() == v1::SqlValue::KIND_NOT_SET) {
        return absl::InvalidArgumentError(absl::StrCat(
            "ops[", i, "].params[", p, "]: no value set (use null for NULL)"));
      }
      if (v.kind_case() == v1::SqlValue::kText &&
          v.text().find('\0') != std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("ops[", i, "].params[", p,
                         "]: text cannot hold NUL bytes; send bytes instead"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status PostgresAdapter::Apply(const WriteTarget& target,
                                    const Operations& ops, OpResults* results) {
  bool retryable = false;
  absl::Status s = ApplyOnce(target, ops, results, &retryable);
  if (s.ok() || !retryable) return s;
  // The connection broke before COMMIT, so nothing was applied: try once
  // more on a fresh connection (PostgreSQL may have restarted).
  results->Clear();
  return ApplyOnce(target, ops, results, &retryable);
}

absl::Status PostgresAdapter::ApplyOnce(const WriteTarget& target,
                                        const Operations& ops,
                                        OpResults* results, bool* retryable) {
  *retryable = false;
  absl::StatusOr<PgConnectionPool::Lease> lease = pool_.Acquire();
  if (!lease.ok()) return lease.status();
  int op_index = -1;
  bool committing = false;
  try {
    pqxx::work tx(lease->conn());
    const std::string domain(target.domain);
    const std::string token = absl::StrCat(target.token);
    pqxx::result fenced = tx.exec_params(fence_upsert_sql_, domain, token);
    if (fenced.empty()) {
      pqxx::result row = tx.exec_params(fence_select_sql_, domain);
      uint64_t highest = row.empty() ? 0 : row[0][0].as<int64_t>();
      tx.abort();
      return StaleTokenError(target.domain, target.token, highest);
    }
    int64_t rows_left = options_.max_result_rows;
    for (op_index = 0; op_index < ops.size(); ++op_index) {
      const v1::SqlStatement& stmt = ops[op_index].sql();
      std::vector<std::string> texts;
      std::vector<const char*> params;
      texts.reserve(stmt.params_size());
      params.reserve(stmt.params_size());
      for (const v1::SqlValue& v : stmt.params()) {
        texts.push_back(ParamText(v));
        params.push_back(v.kind_case() == v1::SqlValue::kNull
                             ? nullptr
                             : texts.back().c_str());
      }
      pqxx::result r = tx.exec_params(
          stmt.sql(), pqxx::prepare::make_dynamic_params(params));
      v1::SqlResult* out = results->Add()->mutable_sql();
      out->set_rows_affected(r.affected_rows());
      for (pqxx::row_size_type c = 0; c < r.columns(); ++c) {
        out->add_columns(r.column_name(c));
      }
      for (const pqxx::row& row : r) {
        if (rows_left <= 0) {
          out->set_truncated(true);
          break;
        }
        --rows_left;
        v1::SqlRow* out_row = out->add_rows();
        for (const pqxx::field& f : row) {
          v1::SqlValue* v = out_row->add_fields();
          if (f.is_null()) {
            v->set_null(true);
          } else {
            v->set_text(std::string(f.c_str(), f.size()));
          }
        }
      }
    }
    op_index = -1;
    FENCEGATE_SYNC_POINT("PostgresAdapter::Apply:BeforeCommit");
    committing = true;
    tx.commit();
    return absl::OkStatus();
  } catch (const pqxx::in_doubt_error& e) {
    lease->Discard();
    return absl::UnavailableError(absl::StrCat(
        "postgres: connection lost during COMMIT, outcome unknown (retry with "
        "the same token): ",
        Trimmed(e.what())));
  } catch (const pqxx::broken_connection& e) {
    lease->Discard();
    *retryable = !committing;
    return absl::UnavailableError(
        absl::StrCat("postgres: connection lost",
                     committing ? " during COMMIT, outcome unknown" : "", ": ",
                     Trimmed(e.what())));
  } catch (const pqxx::sql_error& e) {
    if (CodeForSqlState(e.sqlstate()) == absl::StatusCode::kUnavailable) {
      lease->Discard();
      *retryable = !committing;
    }
    return SqlErrorStatus(e, op_index);
  } catch (const std::exception& e) {
    lease->Discard();
    return absl::InternalError(
        absl::StrCat("postgres: unexpected error: ", e.what()));
  }
}

}  // namespace fencegate
