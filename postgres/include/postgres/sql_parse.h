// Copyright fencegate authors.
//
// SQL text to PostgreSQL's parse tree (libpg_query, the PostgreSQL 15
// grammar), and a walk over a tree's nodes. Shared by the statement
// classifiers (sql_classifier.h, session_sql.h), so by both front doors.
//
// The parse cannot overflow a stack. libpg_query writes a tree out
// recursively, about 360 bytes of stack per level, and a flat expression
// (1+1+...+1) nests one level per two bytes of text, so 60 KB of SQL would
// take 10 MB: more than a thread's stack. ParseSql() runs the parse on the
// calling thread when the text is short enough for the stack the thread
// has left (kStackBytesPerSqlByte per byte), else on one thread of its own
// with a stack large enough for kMaxSqlBytes, which it waits for; its
// stack's pages are given back after each long parse. Text longer than
// kMaxSqlBytes is refused before it is parsed.
//
// The returned tree, up to kMaxSqlTreeDepth levels, is emptied by its
// holder with Flatten() before it is dropped, so that its destruction
// takes no stack either.
//
// Thread safety: pure functions, safe from any thread (libpg_query keeps
// its memory per thread). ParseSql() may block its caller for the parse of
// another thread's long text (long ones are parsed one at a time).

#ifndef POSTGRES_SQL_PARSE_H_
#define POSTGRES_SQL_PARSE_H_

#include <cstddef>

#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "pg_query.pb.h"

namespace fencegate::postgres {

// Parse trees nested deeper than this are refused (protobuf's default, 100,
// is too low for long expressions: a + b + c nests one level per term).
inline constexpr int kMaxSqlTreeDepth = 1000;

// SQL text longer than this is refused unparsed.
inline constexpr size_t kMaxSqlBytes = size_t{1} << 20;

// Stack a parse may take per byte of its text: 360 bytes a level (measured
// with libpg_query 15-4.0, Debian 12), at least two bytes a level, and a
// margin.
inline constexpr size_t kStackBytesPerSqlByte = 256;

// The statements of `sql`. INVALID_ARGUMENT "does not parse: <the parser's
// message> (at character N)", "nests deeper than 1000 levels", or "is N
// bytes of SQL text; at most 1048576 are parsed".
absl::StatusOr<pg_query::ParseResult> ParseSql(absl::string_view sql);

// Bytes of stack left to the calling thread below its current frame
// (0 if the thread's stack cannot be read).
size_t StackLeft();

// Runs `work` on the long-text parser's thread, after what was queued
// there before, and returns at once; ParseSql() called from `work` parses
// on that thread's stack, whatever the text's length. For a caller that
// must not wait while long text is parsed (the PostgreSQL port's I/O
// thread serves every session). If that thread could not be started,
// `work` runs on the caller's thread (where ParseSql() then refuses long
// text).
void RunOnLongTextParser(absl::AnyInvocable<void() &&> work);

// Calls `visit` on `root` and on every message below it, each once, without
// recursion (a tree may be kMaxSqlTreeDepth deep).
void ForEachNode(
    const google::protobuf::Message& root,
    absl::FunctionRef<void(const google::protobuf::Message&)> visit);

// Empties `root`, releasing every message below it without recursion. A
// tree of kMaxSqlTreeDepth levels left to its destructor recurses as deep:
// about 300 KB of stack, and several MB in a Debug build under the
// sanitizers. Callers that hold a parsed tree call this before dropping
// it.
void Flatten(google::protobuf::Message& root);

// The last part of a function call's name (set_config for
// pg_catalog.set_config), as the parser decoded it; empty if it has none.
const std::string& CalledName(const pg_query::FuncCall& call);

}  // namespace fencegate::postgres

#endif  // POSTGRES_SQL_PARSE_H_
