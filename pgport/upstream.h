// Copyright fencegate authors.
//
// Upstream: one connection from the port to a route's PostgreSQL server,
// signed in with the route's credentials (trust, password, MD5 or
// SCRAM-SHA-256, whichever the server asks for), and UpstreamPool, the
// route's idle connections.
//
// A connection serves one client session at a time. It starts with the
// pinned settings (client_encoding UTF8, standard_conforming_strings on:
// postgres/include/postgres/session_sql.h). When a session ends with its
// connection idle (no transaction, nothing owed), the port resets it with
// DISCARD ALL and a new random() seed and gives it back to the pool;
// otherwise it is closed, and the server rolls back whatever transaction it
// held.
//
// The route's URI is read by libpq's own parser (PQconninfoParse): host
// (a TCP host; a socket directory is refused), port, user, password,
// dbname. The port speaks to the server without TLS, so a route whose
// sslmode requires TLS is refused when the port starts.
//
// Thread safety: none; the port's I/O thread uses both.

#ifndef PGPORT_UPSTREAM_H_
#define PGPORT_UPSTREAM_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "pgport/asio.h"
#include "pgport/frame_reader.h"
#include "postgres/route_options.h"

namespace fencegate::pgport {

// Where and as whom a route's connections sign in.
struct UpstreamTarget {
  std::string host;
  std::string port = "5432";
  std::string user;
  std::string password;
  std::string database;
  // Sent in every startup packet: statement_timeout (the route's).
  std::vector<std::pair<std::string, std::string>> parameters;
  // The route's fence schema (postgres/fence_hold.h).
  std::string fence_schema = "fencegate";
  // The route allows a privileged role (allow_privileged_role), which may
  // do anything, advisory locks included: the check that the role cannot
  // release its connection's hold is skipped.
  bool privileged_role = false;
  // The route's read role (sessions without a token): CheckServer checks
  // that it cannot write, instead of what a hold rests on. `write_user` is
  // the route's role, which it must not be a member of.
  bool read_role = false;
  std::string write_user;
};

// One statement of Upstream::RunExtended: its text and text parameters
// (nullopt: NULL).
struct UpstreamStatement {
  std::string sql;
  std::vector<std::optional<std::string>> parameters;
};

// The target of a route's options. INVALID_ARGUMENT for a URI libpq cannot
// parse, a socket directory as host, no user, or an sslmode that requires
// TLS.
absl::StatusOr<UpstreamTarget> UpstreamTargetOf(
    const postgres::RouteOptions& options);

// The route's read role's target (`write` with read_user and
// read_password), or nullopt if the route has none. INVALID_ARGUMENT if it
// is the route's own role.
absl::StatusOr<std::optional<UpstreamTarget>> ReadTargetOf(
    const postgres::RouteOptions& options, const UpstreamTarget& write);

// The SQLSTATE of a server error that Upstream returned; empty for
// another status.
std::string UpstreamSqlState(const absl::Status& status);
inline constexpr char kSqlStatePayload[] = "fencegate.dev/sqlstate";

class Upstream {
 public:
  // Connects and signs in; returns once the server is ready for a query.
  // UNAVAILABLE if it cannot be reached or closes; PERMISSION_DENIED if
  // it refuses the credentials; FAILED_PRECONDITION for an authentication
  // method the port does not speak (GSSAPI, SSPI), a server the port must
  // not serve (server_encoding other than UTF8; max_prepared_transactions
  // above 0, since a prepared transaction outlives its session's fence;
  // a route role that may still call an advisory lock function, which
  // could release the fence its connection holds; dblink or postgres_fdw
  // installed, whose connections no fence holds; a fence schema without
  // hold()), or another server error, with the server's message.
  static asio::awaitable<absl::StatusOr<std::unique_ptr<Upstream>>> Connect(
      const UpstreamTarget& target, size_t max_message_bytes,
      MemoryBudget* memory);

  tcp::socket& socket() { return socket_; }
  FrameReader& reader() { return reader_; }
  // The server's key for cancelling this connection's query.
  int32_t process_id() const { return process_id_; }
  int32_t secret_key() const { return secret_key_; }
  const tcp::endpoint& endpoint() const { return endpoint_; }

  // The server's run-time parameters as last reported (ParameterStatus).
  const std::map<std::string, std::string>& parameters() const {
    return parameters_;
  }
  // Records a ParameterStatus message's body; false if it does not parse.
  bool NoteParameter(const pgwire::Frame& frame);

  // Runs `sql` (the port's own: a reset, settings) and reads every reply
  // up to ReadyForQuery; with `first_value`, the first column of its first
  // row goes there. The server's error as FAILED_PRECONDITION; UNAVAILABLE
  // if the connection fails.
  asio::awaitable<absl::Status> Run(
      const std::string& sql,
      std::optional<std::string>* first_value = nullptr);
  // The same for `statements` sent as one extended-protocol batch (the
  // unnamed statement and portal, one Sync): their parameters never appear
  // in the server's pg_stat_activity. The first error ends the batch.
  asio::awaitable<absl::Status> RunExtended(
      const std::vector<UpstreamStatement>& statements,
      std::optional<std::string>* first_value = nullptr);

 private:
  Upstream(tcp::socket socket, size_t max_message_bytes, MemoryBudget* memory)
      : socket_(std::move(socket)), reader_(max_message_bytes, memory) {}
  asio::awaitable<absl::Status> SignIn(const UpstreamTarget& target);
  // After the sign-in: FAILED_PRECONDITION for a server the port must not
  // serve (Connect says which).
  asio::awaitable<absl::Status> CheckServer(const UpstreamTarget& target);
  // CheckServer of a read role's connection: FAILED_PRECONDITION naming
  // what the role could write, execute or take that a read role must not.
  asio::awaitable<absl::Status> CheckReadRole(const UpstreamTarget& target);
  // Sends `bytes` and reads every reply up to ReadyForQuery (Run says
  // what it returns); `what` names the request in an error.
  asio::awaitable<absl::Status> Exchange(
      const std::string& bytes, const std::string& what,
      std::optional<std::string>* first_value);
  // SHOW `name`: its value, or the server's error.
  asio::awaitable<absl::StatusOr<std::string>> Show(const std::string& name);

  tcp::socket socket_;
  FrameReader reader_;
  tcp::endpoint endpoint_;
  int32_t process_id_ = 0;
  int32_t secret_key_ = 0;
  std::map<std::string, std::string> parameters_;
};

// Sends a CancelRequest for the query `process_id` runs on the server at
// `endpoint`. Best effort, as PostgreSQL's own cancel is.
asio::awaitable<void> CancelUpstream(tcp::endpoint endpoint, int32_t process_id,
                                     int32_t secret_key);

class UpstreamPool {
 public:
  explicit UpstreamPool(size_t max_idle) : max_idle_(max_idle) {}
  // An idle connection, or null.
  std::unique_ptr<Upstream> Take();
  // Keeps `upstream` (already reset) for the next session, or closes it if
  // max_idle are kept already.
  void Give(std::unique_ptr<Upstream> upstream);
  size_t idle() const { return idle_.size(); }

 private:
  const size_t max_idle_;
  std::vector<std::unique_ptr<Upstream>> idle_;
};

}  // namespace fencegate::pgport

#endif  // PGPORT_UPSTREAM_H_
