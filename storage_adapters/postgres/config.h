// Copyright fencegate authors.
//
// Factory of the PostgreSQL adapter, registered for "postgres://" and
// "postgresql://" URIs:
//
//   postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE?pool_size=8&...
//
// Everything is handed to libpq as a connection URI, except these
// parameters, which the adapter takes for itself:
//
//   pool_size            connections kept open               Default: 8
//   pool_wait_ms         wait for a connection, then give up Default: 10000
//   spread_after_ms      wait for a busy connection before an idle one
//                        takes queued writes (0: at once)     Default: 5
//   statement_timeout_ms per-statement timeout (SET)         Default: 30000
//   fence_table          [schema.]table of the fences        Default:
//   fencegate_fences max_result_rows      rows returned per Write, in total
//   Default: 1000
//
// libpq parameters (sslmode, connect_timeout, application_name, ...) pass
// through. Unless the URI sets them: connect_timeout=5; TCP keepalives
// (keepalives=1, keepalives_idle=30, keepalives_interval=10,
// keepalives_count=3) and tcp_user_timeout=60000, so that a server or
// network gone silent breaks the connection within about a minute (the
// write then fails UNAVAILABLE) instead of holding it for ever.

#ifndef STORAGE_ADAPTERS_POSTGRES_CONFIG_H_
#define STORAGE_ADAPTERS_POSTGRES_CONFIG_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "storage_adapters/storage_adapter.h"
#include "storage_adapters/uri.h"

namespace fencegate {

struct PostgresAdapterOptions {
  // libpq connection URI, without the adapter's own parameters.
  std::string conninfo;
  // The URI with any password replaced by "***", for messages and logs.
  std::string redacted_uri;
  // Default: 8.
  int pool_size = 8;
  // Default: 10 s.
  int64_t pool_wait_ms = 10000;
  // How long queued writes wait for a busy connection's next batch before
  // an idle (or new) connection takes them; 0 takes them at once. Fewer
  // connections in use carry bigger batches. At most half of pool_wait_ms
  // takes effect. Default: 5 ms.
  int64_t spread_after_ms = 5;
  // Default: 30 s. 0 disables the timeout.
  int64_t statement_timeout_ms = 30000;
  // Validated identifier, optionally schema-qualified. Default:
  // fencegate_fences.
  std::string fence_table = "fencegate_fences";
  // Default: 1000.
  int64_t max_result_rows = 1000;
};

// Parses and validates the URI. INVALID_ARGUMENT names the parameter.
absl::StatusOr<PostgresAdapterOptions> ParsePostgresUri(const Uri& uri);

// ParsePostgresUri, then builds the adapter. Does not connect: the first
// Write does, so the gateway starts even while PostgreSQL is down.
absl::StatusOr<std::unique_ptr<StorageAdapter>> CreatePostgresAdapter(
    const Uri& uri);

}  // namespace fencegate

#endif  // STORAGE_ADAPTERS_POSTGRES_CONFIG_H_
