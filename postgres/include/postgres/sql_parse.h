// Copyright fencegate authors.
//
// SQL text to PostgreSQL's parse tree (libpg_query, the PostgreSQL 15
// grammar), and a walk over a tree's nodes. Shared by the statement
// classifiers (sql_classifier.h, session_sql.h).
//
// Thread safety: pure functions, safe from any thread (libpg_query keeps
// its memory per thread).

#ifndef POSTGRES_SQL_PARSE_H_
#define POSTGRES_SQL_PARSE_H_

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "pg_query.pb.h"

namespace fencegate::postgres {

// Parse trees nested deeper than this are refused (protobuf's default, 100,
// is too low for long expressions: a + b + c nests one level per term).
inline constexpr int kMaxSqlTreeDepth = 1000;

// The statements of `sql`. INVALID_ARGUMENT "does not parse: <the parser's
// message> (at character N)", or "nests deeper than 1000 levels".
absl::StatusOr<pg_query::ParseResult> ParseSql(absl::string_view sql);

// Calls `visit` on `root` and on every message below it, each once, without
// recursion (a tree may be kMaxSqlTreeDepth deep).
void ForEachNode(
    const google::protobuf::Message& root,
    absl::FunctionRef<void(const google::protobuf::Message&)> visit);

// The last part of a function call's name (set_config for
// pg_catalog.set_config), as the parser decoded it; empty if it has none.
const std::string& CalledName(const pg_query::FuncCall& call);

}  // namespace fencegate::postgres

#endif  // POSTGRES_SQL_PARSE_H_
