// Copyright fencegate authors.
//
// The route role's privileges, read on every new connection. A route's role
// should be able to do what its Writes need and no more: a superuser, or a
// role that can create roles, bypass row-level security, run programs or
// read and write files on the database host (COPY ... PROGRAM,
// pg_read_file), or write the fence table directly, turns any SQL sent
// through the gateway into a way around fencing or into the host. Such a
// role is refused unless the route's URI says allow_privileged_role=true.
//
// Thread safety: pure functions, safe from any thread; ReadRoleAttributes
// uses the connection it is given, which one thread owns.

#ifndef STORAGE_ADAPTERS_POSTGRES_ROLE_CHECK_H_
#define STORAGE_ADAPTERS_POSTGRES_ROLE_CHECK_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "storage_adapters/postgres/pg_connection.h"

namespace fencegate::postgres {

// What the connection's session user may do.
struct RoleAttributes {
  std::string name;
  bool superuser = false;
  bool create_role = false;
  bool bypass_rls = false;
  // Roles it is a member of (so may SET ROLE to) that are superusers, may
  // create roles or bypass RLS, the predefined pg_execute_server_program,
  // pg_read_server_files and pg_write_server_files, or the fence schema's
  // owner; comma-separated, empty if none.
  std::string privileged_memberships;
  // It holds INSERT, UPDATE, DELETE or TRUNCATE on <schema>.fences.
  bool writes_fence_table = false;
  // It may call <schema>.fence(text, bigint), fence_next(text, bigint)
  // and fences(): the schema and functions exist (a schema set up by an
  // earlier pg-setup lacks the last two) and it has USAGE and EXECUTE.
  bool can_call_fence = false;
  // It may create temporary tables in the current database.
  bool temp = false;
  // Schemas it may create objects in; comma-separated, empty if none.
  std::string create_schemas;
  // Every role it is a member of but itself; comma-separated.
  std::string memberships;
  // Its own settings from ALTER ROLE ... SET (pg_db_role_setting), which
  // every new session of the role starts with; empty if none.
  std::string role_settings;
  // The session-state functions (fence_schema.h) it may execute, by name;
  // comma-separated, empty if none. Only logged: the SQL classifier keeps
  // them out of Writes.
  std::string session_functions;
};

// One query on `conn`. UNAVAILABLE if it fails (PostgreSQL's message).
absl::StatusOr<RoleAttributes> ReadRoleAttributes(PgConnection& conn,
                                                  const std::string& schema);

// "role billing: superuser=no createrole=no bypassrls=no ..." for the log.
std::string DescribeRole(const RoleAttributes& role);

// FAILED_PRECONDITION if the role cannot call the fence function (run
// `fencectl pg-setup`), or, unless `allow_privileged`, is privileged or can
// make a Write's effects on the session outlast it: TEMP on the database,
// CREATE on any schema, membership of any other role, or settings of its
// own (ALTER ROLE ... SET). The message names every such privilege.
absl::Status CheckRole(const RoleAttributes& role, const std::string& schema,
                       bool allow_privileged);

}  // namespace fencegate::postgres

#endif  // STORAGE_ADAPTERS_POSTGRES_ROLE_CHECK_H_
