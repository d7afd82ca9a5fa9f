// Copyright fencegate authors.

#include "storage_adapters/postgres/role_check.h"

#include <exception>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pqxx/nontransaction"
#include "storage_adapters/postgres/fence_schema.h"

namespace fencegate::postgres {
namespace {

// $1 schema, $2 "schema".fence(text,bigint), $3 "schema".fences, $4 owner.
// Every lookup inside the schema is guarded by USAGE on it: without it,
// to_regclass and to_regprocedure raise instead of answering.
constexpr char kRoleQuery[] = R"sql(
SELECT r.rolname, r.rolsuper, r.rolcreaterole, r.rolbypassrls,
  COALESCE((SELECT string_agg(s.rolname, ',' ORDER BY s.rolname)
    FROM pg_catalog.pg_roles s
    WHERE s.oid <> r.oid AND pg_catalog.pg_has_role(r.oid, s.oid, 'MEMBER')
      AND (s.rolsuper OR s.rolcreaterole OR s.rolbypassrls OR s.rolname IN
        ('pg_execute_server_program', 'pg_read_server_files',
         'pg_write_server_files', $4))), ''),
  CASE WHEN pg_catalog.to_regnamespace($1) IS NULL THEN false
       WHEN NOT pg_catalog.has_schema_privilege(r.oid, $1, 'USAGE') THEN false
       ELSE COALESCE(pg_catalog.has_table_privilege(r.oid,
              pg_catalog.to_regclass($3), 'INSERT,UPDATE,DELETE,TRUNCATE'),
            false) END,
  CASE WHEN pg_catalog.to_regnamespace($1) IS NULL THEN false
       WHEN NOT pg_catalog.has_schema_privilege(r.oid, $1, 'USAGE') THEN false
       ELSE COALESCE(pg_catalog.has_function_privilege(r.oid,
              pg_catalog.to_regprocedure($2), 'EXECUTE'), false) END
FROM pg_catalog.pg_roles r WHERE r.rolname = session_user)sql";

const char* YesNo(bool b) { return b ? "yes" : "no"; }

}  // namespace

absl::StatusOr<RoleAttributes> ReadRoleAttributes(PgConnection& conn,
                                                  const std::string& schema) {
  const std::string quoted = absl::StrCat("\"", schema, "\"");
  try {
    pqxx::nontransaction tx(conn);
    pqxx::result r = tx.exec_params(
        kRoleQuery, schema, absl::StrCat(quoted, ".fence(text,bigint)"),
        absl::StrCat(quoted, ".fences"), OwnerRole(schema));
    if (r.size() != 1) {
      return absl::UnavailableError("postgres: session user not in pg_roles");
    }
    RoleAttributes a;
    a.name = r[0][0].as<std::string>();
    a.superuser = r[0][1].as<bool>();
    a.create_role = r[0][2].as<bool>();
    a.bypass_rls = r[0][3].as<bool>();
    a.privileged_memberships = r[0][4].as<std::string>();
    a.writes_fence_table = r[0][5].as<bool>();
    a.can_call_fence = r[0][6].as<bool>();
    return a;
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("postgres: reading the role's privileges: ", e.what()));
  }
}

std::string DescribeRole(const RoleAttributes& role) {
  return absl::StrCat(
      "role ", role.name, ": superuser=", YesNo(role.superuser),
      " createrole=", YesNo(role.create_role),
      " bypassrls=", YesNo(role.bypass_rls), " privileged_memberships=",
      role.privileged_memberships.empty() ? "none"
                                          : role.privileged_memberships,
      " writes_fence_table=", YesNo(role.writes_fence_table),
      " can_call_fence=", YesNo(role.can_call_fence));
}

absl::Status CheckRole(const RoleAttributes& role, const std::string& schema,
                       bool allow_privileged) {
  if (!role.can_call_fence) {
    return absl::FailedPreconditionError(absl::StrCat(
        "postgres: role ", role.name, " cannot call ", schema,
        ".fence(text, bigint): run `fencectl pg-setup --admin_dsn=... "
        "--role=",
        role.name, " --schema=", schema, "` (docs/postgres.md)"));
  }
  std::vector<std::string> privileges;
  if (role.superuser) privileges.push_back("SUPERUSER");
  if (role.create_role) privileges.push_back("CREATEROLE");
  if (role.bypass_rls) privileges.push_back("BYPASSRLS");
  if (!role.privileged_memberships.empty()) {
    privileges.push_back(
        absl::StrCat("member of ", role.privileged_memberships));
  }
  if (role.writes_fence_table) {
    privileges.push_back(absl::StrCat("can write ", schema, ".fences"));
  }
  if (privileges.empty() || allow_privileged) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "postgres: role ", role.name, " is privileged (",
      absl::StrJoin(privileges, ", "),
      "): SQL sent through the route could bypass fencing or reach the "
      "database host. Use a role without these privileges, or add "
      "allow_privileged_role=true to the route's URI"));
}

}  // namespace fencegate::postgres
