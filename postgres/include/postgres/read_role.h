// Copyright fencegate authors.
//
// The read role of a route served by the PostgreSQL port (docs/pgwire.md,
// "A session without a token"): the role its sessions without a token run
// as, so that PostgreSQL itself keeps them from writing. `fencectl pg-setup
// --read_role` makes an existing login role one:
//
//   - it is granted pg_read_all_data (SELECT on every table, view and
//     sequence, USAGE on every schema) and nothing that writes;
//   - TEMP on the database is taken from it;
//   - it must not be the route's role, the fence schema's owner, a
//     superuser, or a member of the route's role (which would let it
//     signal the route role's backends, or become it): FAILED_PRECONDITION
//     otherwise, saying what to change.
//
// Privileges granted to it by other means (a GRANT UPDATE of the
// application's) are left alone: the port checks each new connection of
// the read role and refuses to serve it while it can write, naming what
// (pgport/upstream.h, CheckReadRole). The session functions (advisory
// locks, pg_cancel_backend, ...) are taken from PUBLIC by
// --revoke_session_functions, which the port requires.
//
// Thread safety: pure functions; each call opens its own connection.

#ifndef POSTGRES_READ_ROLE_H_
#define POSTGRES_READ_ROLE_H_

#include <string>

#include "absl/status/status.h"

namespace fencegate::postgres {

// Connects to `admin_conninfo` (a superuser, or a role that may grant
// pg_read_all_data) and makes `read_role` the read role of the route whose
// role is `route_role`, with fences in `schema`, in one transaction.
// INVALID_ARGUMENT for a bad name, NOT_FOUND if a role does not exist,
// FAILED_PRECONDITION as above, UNAVAILABLE if the server cannot be
// reached, INTERNAL for other SQL errors. Idempotent.
absl::Status SetUpReadRole(const std::string& admin_conninfo,
                           const std::string& schema,
                           const std::string& read_role,
                           const std::string& route_role);

}  // namespace fencegate::postgres

#endif  // POSTGRES_READ_ROLE_H_
