// Copyright fencegate authors.
//
// PostgresAdapter, what a Write may send: Validate() (values, parameters,
// and each statement's class from the SQL classifier) and the named
// statements classified at start-up. The connections on the event loop are
// in postgres_adapter_loop.cc, one batch's pipeline in pg_pipeline.cc.

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "fencegate/common/limits.h"
#include "postgres/fence_token.h"
#include "postgres/sql_classifier.h"
#include "storage_adapters/postgres/postgres_adapter.h"

namespace fencegate {
namespace {

using postgres::StatementClass;

constexpr size_t kMaxSqlBytes = 1 << 20;
constexpr int kMaxParams = 65535;

}  // namespace

absl::Status PostgresAdapter::AddNamedStatement(const std::string& name,
                                                const std::string& sql,
                                                bool session_safe) {
  if (sql.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(
        "holds a NUL byte, where PostgreSQL would cut the statement");
  }
  const postgres::Verdict verdict = postgres::ClassifyStatement(sql);
  if (verdict.statement.empty() ||
      absl::StartsWith(verdict.statement, "transaction control") ||
      verdict.statement == "COPY") {
    return absl::InvalidArgumentError(verdict.reason);
  }
  named_[name] =
      NamedStatement{verdict.kind == StatementClass::kSafe || session_safe
                         ? StatementClass::kSafe
                         : StatementClass::kDirty,
                     verdict.params, verdict.callees};
  return absl::OkStatus();
}

void PostgresAdapter::Inspect(const Operations& ops, bool* dirty,
                              bool* opaque) const {
  *dirty = false;
  *opaque = false;
  std::shared_ptr<const postgres::CatalogNames> catalog = catalog_names();
  for (const v1::Operation& op : ops) {
    if (!op.has_sql()) continue;
    const v1::SqlStatement& sql = op.sql();
    if (sql.has_statement()) {
      auto it = named_.find(sql.statement());
      if (it != named_.end()) {
        *dirty |= it->second.kind == StatementClass::kDirty;
        *opaque |=
            postgres::CallsOutsideCatalog(it->second.callees, catalog.get());
        continue;
      }
    }
    const postgres::Verdict verdict = classifier_->Classify(sql.sql());
    *dirty |= verdict.kind == StatementClass::kDirty;
    *opaque |= postgres::CallsOutsideCatalog(verdict.callees, catalog.get());
  }
}

std::shared_ptr<const postgres::CatalogNames> PostgresAdapter::catalog_names()
    const {
  absl::MutexLock lock(&catalog_mu_);
  return catalog_;
}

absl::Status PostgresAdapter::Validate(const WriteTarget& target,
                                       const Operations& ops) const {
  if (absl::Status s = postgres::CheckFenceToken(target.token, "token:");
      !s.ok()) {
    return s;
  }
  if (target.path.empty()) {
    return absl::InvalidArgumentError(
        "resource: name what is written after the route, e.g. \"db/jobs\"");
  }
  // Each statement's text is parsed before anything is sent, at about a
  // second or two of CPU per MiB: bounded per Write, before any parse.
  int64_t sql_bytes = 0;
  for (const v1::Operation& op : ops) {
    if (op.has_sql() &&
        !(op.sql().has_statement() && named_.contains(op.sql().statement()))) {
      sql_bytes += static_cast<int64_t>(op.sql().sql().size());
    }
  }
  if (sql_bytes > options_.max_sql_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("ops: ", sql_bytes,
                     " bytes of SQL text in all exceed the route's "
                     "max_sql_bytes (",
                     options_.max_sql_bytes, ")"));
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
    if (stmt.sql().find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ops[", i,
          "].sql: holds a NUL byte, where PostgreSQL would cut the statement"));
    }
    if (absl::Status s =
            ValidateUtf8(stmt.sql(), absl::StrCat("ops[", i, "].sql"));
        !s.ok()) {
      return s;
    }
    if (stmt.sql().size() > kMaxSqlBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ops[", i, "].sql: longer than ", kMaxSqlBytes, " bytes"));
    }
    int params = 0;
    if (auto named =
            stmt.has_statement() ? named_.find(stmt.statement()) : named_.end();
        named != named_.end()) {
      // Classified at start-up (AddNamedStatement).
      params = named->second.params;
    } else {
      bool hit = false;
      const postgres::Verdict verdict = classifier_->Classify(stmt.sql(), &hit);
      if (classifier_hits_ != nullptr) {
        (hit ? classifier_hits_ : classifier_misses_)->Increment();
      }
      if (verdict.kind == StatementClass::kRefused) {
        return absl::InvalidArgumentError(
            absl::StrCat("ops[", i, "].sql: ", verdict.reason));
      }
      if (verdict.kind == StatementClass::kDirty &&
          !options_.allow_dirty_statements) {
        return absl::InvalidArgumentError(absl::StrCat(
            "ops[", i, "].sql: ", verdict.statement,
            " runs code that may change the pooled session; this route does "
            "not take it (the route's URI can allow it with "
            "allow_dirty_statements=true; docs/postgres.md)"));
      }
      params = verdict.params;
    }
    if (stmt.params_size() != params) {
      // PostgreSQL would refuse the Write's bind with a protocol error.
      return absl::InvalidArgumentError(absl::StrCat(
          "ops[", i, "].params: the statement takes ", params,
          params == 0 ? " parameters"
                      : absl::StrCat(" parameters ($1 to $", params, ")"),
          ", ", stmt.params_size(), " given"));
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
      if (v.kind_case() == v1::SqlValue::kText) {
        if (absl::Status s = ValidateUtf8(
                v.text(), absl::StrCat("ops[", i, "].params[", p, "].text"));
            !s.ok()) {
          return s;
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace fencegate
