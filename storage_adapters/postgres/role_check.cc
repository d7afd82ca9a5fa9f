// Copyright fencegate authors.

#include "storage_adapters/postgres/role_check.h"

#include <exception>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "postgres/fence_schema.h"

namespace fencegate::postgres {
namespace {

// $1 schema, $2 "schema".fence(text,bigint), $3 "schema".fences, $4 owner,
// $5 "schema".fence_next(text,bigint), $6 "schema".fences().
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
              pg_catalog.to_regprocedure($2), 'EXECUTE') AND
            pg_catalog.has_function_privilege(r.oid,
              pg_catalog.to_regprocedure($5), 'EXECUTE') AND
            pg_catalog.has_function_privilege(r.oid,
              pg_catalog.to_regprocedure($6), 'EXECUTE'), false) END,
  pg_catalog.has_database_privilege(r.oid, pg_catalog.current_database(),
    'TEMP'),
  COALESCE((SELECT string_agg(n.nspname, ',' ORDER BY n.nspname)
    FROM pg_catalog.pg_namespace n
    WHERE pg_catalog.has_schema_privilege(r.oid, n.oid, 'CREATE')), ''),
  COALESCE((SELECT string_agg(s.rolname, ',' ORDER BY s.rolname)
    FROM pg_catalog.pg_roles s
    WHERE s.oid <> r.oid AND pg_catalog.pg_has_role(r.oid, s.oid, 'MEMBER')),
    ''),
  COALESCE((SELECT string_agg(pg_catalog.array_to_string(d.setconfig, ' '),
      '; ') FROM pg_catalog.pg_db_role_setting d WHERE d.setrole = r.oid), ''),
  COALESCE((SELECT string_agg(DISTINCT p.proname, ',' ORDER BY p.proname)
    FROM pg_catalog.pg_proc p WHERE $SESSION_FUNCTIONS
      AND pg_catalog.has_function_privilege(r.oid, p.oid, 'EXECUTE')), '')
FROM pg_catalog.pg_roles r WHERE r.rolname = session_user)sql";

// kRoleQuery with the session functions' condition filled in.
const std::string& RoleQuery() {
  static const auto* const kQuery = new std::string(absl::StrReplaceAll(
      kRoleQuery, {{"$SESSION_FUNCTIONS", SessionFunctionsCondition()}}));
  return *kQuery;
}

const char* YesNo(bool b) { return b ? "yes" : "no"; }

}  // namespace

absl::StatusOr<RoleAttributes> ReadRoleAttributes(PgConnection& conn,
                                                  const std::string& schema) {
  const std::string quoted = absl::StrCat("\"", schema, "\"");
  absl::StatusOr<PgResult> r = conn.Exec(
      RoleQuery(), {schema, absl::StrCat(quoted, ".fence(text,bigint)"),
                    absl::StrCat(quoted, ".fences"), OwnerRole(schema),
                    absl::StrCat(quoted, ".fence_next(text,bigint)"),
                    absl::StrCat(quoted, ".fences()")});
  if (!r.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "postgres: reading the role's privileges: ", r.status().message()));
  }
  const PGresult* row = r->get();
  if (PQntuples(row) != 1) {
    return absl::UnavailableError("postgres: session user not in pg_roles");
  }
  auto text = [&](int column) {
    return std::string(PQgetvalue(row, 0, column));
  };
  auto flag = [&](int column) { return text(column) == "t"; };
  RoleAttributes a;
  a.name = text(0);
  a.superuser = flag(1);
  a.create_role = flag(2);
  a.bypass_rls = flag(3);
  a.privileged_memberships = text(4);
  a.writes_fence_table = flag(5);
  a.can_call_fence = flag(6);
  a.temp = flag(7);
  a.create_schemas = text(8);
  a.memberships = text(9);
  a.role_settings = text(10);
  a.session_functions = text(11);
  return a;
}

std::string DescribeRole(const RoleAttributes& role) {
  return absl::StrCat(
      "role ", role.name, ": superuser=", YesNo(role.superuser),
      " createrole=", YesNo(role.create_role),
      " bypassrls=", YesNo(role.bypass_rls), " privileged_memberships=",
      role.privileged_memberships.empty() ? "none"
                                          : role.privileged_memberships,
      " writes_fence_table=", YesNo(role.writes_fence_table),
      " can_call_fence=", YesNo(role.can_call_fence),
      " temp=", YesNo(role.temp),
      " create_on=", role.create_schemas.empty() ? "none" : role.create_schemas,
      " member_of=", role.memberships.empty() ? "none" : role.memberships,
      " role_settings=", role.role_settings.empty() ? "none" : "yes",
      " session_functions=",
      role.session_functions.empty()
          ? "none"
          : absl::StrCat(role.session_functions,
                         " (refused in Writes by the SQL classifier; `fencectl "
                         "pg-setup --revoke_session_functions` revokes them)"));
}

absl::Status CheckRole(const RoleAttributes& role, const std::string& schema,
                       bool allow_privileged) {
  if (!role.can_call_fence) {
    return absl::FailedPreconditionError(absl::StrCat(
        "postgres: role ", role.name, " cannot call ", schema,
        ".fence(text, bigint), fence_next(text, bigint) and fences(): run "
        "`fencectl pg-setup --admin_dsn=... "
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
  // What a Write could make outlast itself, in this session or in every
  // later one of the role.
  if (role.temp) {
    privileges.push_back("TEMP on the database (temporary tables)");
  }
  if (!role.create_schemas.empty()) {
    privileges.push_back(
        absl::StrCat("CREATE on schema ", role.create_schemas));
  }
  if (!role.memberships.empty()) {
    privileges.push_back(
        absl::StrCat("member of ", role.memberships, " (SET ROLE)"));
  }
  if (!role.role_settings.empty()) {
    privileges.push_back(absl::StrCat(
        "role settings (ALTER ROLE ... SET: ", role.role_settings, ")"));
  }
  if (privileges.empty() || allow_privileged) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "postgres: role ", role.name, " is privileged (",
      absl::StrJoin(privileges, ", "),
      "): SQL sent through the route could bypass fencing, reach the "
      "database host, or leave state behind for later Writes. Use a role "
      "without these privileges (`fencectl pg-setup` revokes TEMP; "
      "docs/postgres.md), or add "
      "allow_privileged_role=true to the route's URI"));
}

}  // namespace fencegate::postgres
