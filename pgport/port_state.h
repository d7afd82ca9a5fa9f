// Copyright fencegate authors.
//
// PortState: what every session of the PostgreSQL port shares: the
// options, the routes with their upstream targets and idle connections,
// the I/O context all of it runs on, and the sessions by process id, for
// CancelRequest.
//
// Thread safety: everything but `options` and `context` is used on the
// port's I/O thread only.

#ifndef PGPORT_PORT_STATE_H_
#define PGPORT_PORT_STATE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "pgport/asio.h"
#include "pgport/pg_port.h"
#include "pgport/tls.h"
#include "pgport/upstream.h"
#include "postgres/sql_classifier.h"

namespace fencegate::pgport {

class ClientSession;

struct PortRoute {
  PgPortRoute spec;
  UpstreamTarget target;
  std::unique_ptr<UpstreamPool> pool;
  // The read role's, for sessions without a token; nullopt and null if the
  // route has none (such sessions are refused).
  std::optional<UpstreamTarget> read_target;
  std::unique_ptr<UpstreamPool> read_pool;
  // The RaiseWatch's connection while it has one (closed at shutdown, so
  // that a server that stopped answering holds nothing up).
  Upstream* watch = nullptr;
};

struct PortState {
  PgPortOptions options;
  PgPortContext context;
  asio::io_context io{1};
  absl::flat_hash_map<std::string, PortRoute> routes;
  // Open sessions by the process id the port gave them.
  absl::flat_hash_map<int32_t, std::weak_ptr<ClientSession>> sessions;
  int32_t next_process_id = 1;
  // TLS, if the gateway has its files; else null.
  std::unique_ptr<PortTls> tls;
  // What the sessions' query strings and prepared statements do: the
  // gateway's SQL classifier (PgPortContext::classifier), or the port's own.
  postgres::SqlClassifier* sql = nullptr;
  std::unique_ptr<postgres::SqlClassifier> own_sql;
  bool stopping = false;
};

}  // namespace fencegate::pgport

#endif  // PGPORT_PORT_STATE_H_
