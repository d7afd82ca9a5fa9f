// Copyright fencegate authors.
//
// A PostgreSQL route's settings, read once for both doors (the adapter
// of "postgres://" and "postgresql://" URIs, and the PostgreSQL port):
//
//   postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE?pool_size=8&...
//
// The route's own settings are the fields of fencegate.v1.PostgresRoute
// (proto/fencegate/v1/config.proto), with their defaults and bounds there:
// pool_size, pool_wait_ms, spread_after_ms, statement_timeout_ms,
// fence_schema, max_result_rows, max_result_bytes, allow_privileged_role,
// allow_dirty_statements, search_path, read_user, read_password,
// max_sql_bytes, max_connections_per_caller, session_safe_functions. A route
// gives them typed, in the configuration file (routes { ... postgres {
// pool_size: 8 } }), or as parameters of its URI, the shorthand
// (?pool_size=8&search_path=a,b); a setting given both ways must agree.
// Everything else in the query is handed to libpq.
//
// libpq parameters (sslmode, connect_timeout, application_name, ...) pass
// through, but for client_encoding (refused: the gateway speaks UTF8) and
// options (refused: settings given at connection would apply to every
// Write). standard_conforming_strings=on is sent in the startup packet, so
// that the server reads a statement's text as the classifier did. Unless the
// URI sets them: connect_timeout=5; TCP keepalives (keepalives=1,
// keepalives_idle=30, keepalives_interval=10, keepalives_count=3) and
// tcp_user_timeout=60000, so that a server or network gone silent breaks the
// connection within about a minute (the write then fails UNAVAILABLE) instead
// of holding it for ever.

#ifndef POSTGRES_ROUTE_OPTIONS_H_
#define POSTGRES_ROUTE_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fencegate/common/uri.h"
#include "fencegate/v1/config.pb.h"

namespace fencegate::postgres {

// Built by ParseRouteUri only, from the route's settings with
// PostgresRoute's defaults filled (config.proto, the only place a default is
// written; the "Default:" notes below repeat them for the reader).
struct RouteOptions {
  // libpq connection URI, without the adapter's own parameters.
  std::string conninfo;
  // The URI with any password replaced by "***", for messages and logs.
  std::string redacted_uri;
  // Default: 8.
  int pool_size{};
  // Default: 10 s.
  int64_t pool_wait_ms{};
  // How long queued writes wait for a busy connection's next batch before
  // an idle (or new) connection takes them; 0 takes them at once. Fewer
  // connections in use carry bigger batches. At most half of pool_wait_ms
  // takes effect. Default: 5 ms.
  int64_t spread_after_ms{};
  // PostgreSQL's statement_timeout of every connection (sent in the
  // startup packet, so that the per-Write reset restores it), and the
  // gateway's own limit on one Write's run, past which it cancels the
  // Write (PQcancel) whatever the session set. 0 disables both.
  // Default: 30 s.
  int64_t statement_timeout_ms{};
  // Schema of the fence table and function (fence_schema.h), a plain
  // identifier. Default: fencegate.
  std::string fence_schema;
  // Rows returned per Write, in total. Default: 1000.
  int64_t max_result_rows{};
  // Bytes of returned fields per Write, in total; rows past it are left
  // out (truncated: true). Default: 4 MiB.
  int64_t max_result_bytes{};
  // Bytes of SQL text per Write, in all its statements (a named
  // statement's, classified at start-up, not counted); a Write with more is
  // INVALID_ARGUMENT, unparsed. At most 1 MiB, what the parser takes.
  int64_t max_sql_bytes{};
  // Connections one caller's writes may occupy at once (WriteTarget::
  // caller); 0: a fair share, pool_size divided by the callers with writes
  // queued or in flight, at most pool_size - 1. Writes without a caller
  // are not counted.
  int64_t max_connections_per_caller{};
  // Domains one connection keeps held between Writes (the route's held
  // fence, docs/postgres.md), least recently used given up first; 0: every
  // Write calls fence(). Default: 64.
  int64_t held_domains{};
  // Function names outside pg_catalog vouched to change no session state
  // (catalog_names.h): Writes that call them keep their batch.
  std::vector<std::string> session_safe_functions;
  // Accept a role with superuser, CREATEROLE, BYPASSRLS, or membership of
  // pg_execute_server_program, pg_read_server_files or
  // pg_write_server_files, or one that can write the fence table
  // directly. Default: false (such a connection is refused).
  bool allow_privileged_role{};
  // Take DO blocks and CALLs (sql_classifier.h: dirty), which may change
  // anything the session keeps: each runs last in its batch, inside
  // BEGIN ... COMMIT, and the session is reset (DISCARD ALL) before its
  // connection serves anyone else. Default: false (INVALID_ARGUMENT).
  bool allow_dirty_statements{};
  // The session's search_path, sent in the startup packet with pg_temp
  // appended last. Default: $user, public.
  std::vector<std::string> search_path;
  // The PostgreSQL port's role for sessions without a token, and its
  // password; empty: none (such sessions are refused). The adapter itself
  // never uses them.
  std::string read_user;
  std::string read_password;
};

// The route's settings: `typed` (may be null) with the URI's query merged
// in, the schema's defaults filled, and each checked; the query's libpq
// parameters are appended to `libpq_params`. INVALID_ARGUMENT, quoting the
// URI (never its password), names the parameter.
absl::StatusOr<v1::PostgresRoute> ParseRouteSettings(
    const Uri& uri, const v1::PostgresRoute* typed,
    std::vector<std::string>* libpq_params);

// ParseRouteSettings, then the adapter's options from them.
absl::StatusOr<RouteOptions> ParseRouteUri(
    const Uri& uri, const v1::PostgresRoute* typed = nullptr);

// The connections one caller's writes may occupy at once: the setting, at
// most pool_size; 0 if the setting is 0 (then the share is fair: the
// connections divided by the callers with writes, BatchQueue::Options).
size_t PerCallerConnections(const RouteOptions& options);

}  // namespace fencegate::postgres

#endif  // POSTGRES_ROUTE_OPTIONS_H_
