// Copyright fencegate authors.
//
// PgPort: the gateway's PostgreSQL protocol port (docs/pgwire.md). A worker
// points its connection string at it instead of at its database and
// changes no code: the port speaks protocol v3 to the client, opens one
// connection to the route's server for each client session, and passes
// the session's messages through, fencing each transaction:
//
// - the startup packet's database names a PostgreSQL route; its `options`
//   carry fencegate.domain and fencegate.token (-c settings), which
//   SET fencegate.* changes and SHOW fencegate.* reads, answered by the
//   port and never sent upstream;
// - in a session with a token, each transaction is checked first against
//   this gateway's fence (the Fencer: stale refused, an advance made
//   durable before anything is sent), then the database's fence call goes
//   first in the transaction, in the same round trip as the client's
//   first statement (pgport/transaction_tracker.h says where transactions
//   begin);
// - a session without a token is read-only: default_transaction_read_only
//   is on, and the statements that would lift it are refused;
// - a transaction left idle longer than idle_transaction_timeout ends the
//   session, and the server rolls it back;
// - with the gateway's TLS files the port serves TLS only, and a verified
//   client certificate is the session's identity: the policy's rules apply
//   to each fenced transaction (WRITE on the domain, the route as the
//   resource), and its advances are audited.
//
// The port runs on one I/O thread of its own; sessions never block it.
// Blocking work (a fence's sync, learning a database's higher fence) runs
// where the Fencer runs its work.
//
// Thread safety: Start, port and Shutdown from any thread; Shutdown once.

#ifndef PGPORT_PG_PORT_H_
#define PGPORT_PG_PORT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fencegate/common/memory_budget.h"
#include "fencing/fencer.h"
#include "postgres/route_options.h"
#include "security/request_gate.h"
#include "security/server_tls.h"
#include "security/user_file.h"

namespace fencegate {

namespace postgres {
class SqlClassifier;
}  // namespace postgres

struct PgPortRoute {
  // The route's name: what a client gives as its database.
  std::string name;
  postgres::RouteOptions options;
};

// Filled by the gateway from its options (GatewayServer), whose values
// come from the configuration or config.proto's defaults: no default here.
struct PgPortOptions {
  // host:port; port 0 picks one (PgPort::port()).
  std::string listen_address;
  // The users who may sign in, with SCRAM-SHA-256; null: every client
  // without a client certificate is admitted without a password (the
  // configuration allows that only on a loopback address).
  std::shared_ptr<const UserFile> users;
  // The gateway's TLS files. Enabled: the port serves TLS to a client that
  // asks (SSLRequest) and refuses a session without it; with a client CA, a
  // client certificate it verifies signs the session in as the
  // certificate's identity (security/peer_identity.h), without a password.
  ServerTlsOptions tls;
  // A client certificate is required (a policy is in force: it grants
  // certificate identities).
  bool require_client_certificate{};
  // Client sessions open at once; more are refused (SQLSTATE 53300).
  uint32_t max_connections{};
  // Largest message a client may send, header included.
  size_t max_message_bytes{};
  // A session must have signed in (startup packet, TLS handshake, password)
  // and have its server connection within this; else it is closed, so
  // that silent connections cannot hold the session slots. 0: no limit.
  absl::Duration startup_timeout;
  // A session idle inside a transaction this long is ended. 0: never.
  absl::Duration idle_transaction_timeout;
  std::vector<PgPortRoute> routes;
};

struct PgPortContext {
  // Not owned; outlives the port.
  Fencer* fencer = nullptr;
  // Runs blocking work off the port's thread (the gateway's I/O pool).
  absl::AnyInvocable<void(absl::AnyInvocable<void() &&>) const> run_blocking;
  // Admits each fenced transaction under the policy in force and audits
  // its advances, as it does a gRPC Write (kPgTransactionMethod); may be
  // null (no policy, no audit). Not owned; outlives the port.
  const RequestGate* gate = nullptr;
  // The gateway's memory budget, shared with its gRPC Writes: each message
  // a session holds past 64 KiB is reserved there (pgport/frame_reader.h).
  // May be null (no bound). Not owned; outlives the port.
  MemoryBudget* memory = nullptr;
  // The gateway's SQL classifier, shared with its PostgreSQL routes; null:
  // the port keeps its own. Not owned; outlives the port.
  postgres::SqlClassifier* classifier = nullptr;
};

class PgPort {
 public:
  // Checks every route (UpstreamTargetOf), binds the address and starts
  // serving. INVALID_ARGUMENT for a route the port cannot reach or a bad
  // address; UNAVAILABLE if the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<PgPort>> Start(PgPortOptions options,
                                                       PgPortContext context);
  // Shuts down if Shutdown() was not called.
  ~PgPort();

  int port() const;

  // Stops accepting, closes every session (their servers roll back what
  // they held) and joins the thread.
  void Shutdown();

  class Impl;

 private:
  explicit PgPort(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fencegate

#endif  // PGPORT_PG_PORT_H_
