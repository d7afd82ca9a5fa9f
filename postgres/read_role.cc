// Copyright fencegate authors.

#include "postgres/read_role.h"

#include "absl/strings/str_cat.h"
#include "postgres/admin_transaction.h"
#include "postgres/fence_schema.h"
#include "pqxx/result"

namespace fencegate::postgres {

absl::Status SetUpReadRole(const std::string& admin_conninfo,
                           const std::string& schema,
                           const std::string& read_role,
                           const std::string& route_role) {
  if (absl::Status s = CheckName("schema", schema); !s.ok()) return s;
  if (absl::Status s = CheckName("read role", read_role); !s.ok()) return s;
  if (absl::Status s = CheckName("role", route_role); !s.ok()) return s;
  if (read_role == route_role || read_role == OwnerRole(schema)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "read role \"", read_role, "\" is the ",
        read_role == route_role ? "route's role" : "fence schema's owner",
        ": the read role must be a role of its own, that cannot write"));
  }
  return InAdminTransaction(admin_conninfo, [&](pqxx::work& tx) {
    for (const std::string& r : {read_role, route_role}) {
      if (!RoleExists(tx, r)) {
        return absl::NotFoundError(
            absl::StrCat("pg-setup: role \"", r,
                         "\" does not exist; create it first, e.g. CREATE "
                         "ROLE ",
                         r, " LOGIN PASSWORD '...'"));
      }
    }
    const pqxx::row attributes = tx.exec_params1(
        "SELECT r.rolsuper OR r.rolcreaterole OR r.rolcreatedb OR "
        "r.rolbypassrls, pg_catalog.pg_has_role(r.oid, w.oid, 'MEMBER') "
        "FROM pg_catalog.pg_roles r, pg_catalog.pg_roles w "
        "WHERE r.rolname = $1 AND w.rolname = $2",
        read_role, route_role);
    if (attributes[0].as<bool>()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "pg-setup: read role \"", read_role,
          "\" is a superuser, or may create roles or databases, or bypass "
          "row security: ALTER ROLE ",
          read_role, " NOSUPERUSER NOCREATEROLE NOCREATEDB NOBYPASSRLS"));
    }
    if (attributes[1].as<bool>()) {
      return absl::FailedPreconditionError(
          absl::StrCat("pg-setup: read role \"", read_role,
                       "\" is a member of the route's role \"", route_role,
                       "\": REVOKE ", route_role, " FROM ", read_role));
    }
    tx.exec(absl::StrCat("GRANT pg_read_all_data TO \"", read_role, "\""));
    tx.exec(absl::StrCat(
        "DO $$BEGIN EXECUTE pg_catalog.format('REVOKE TEMPORARY ON DATABASE "
        "%I FROM %I', pg_catalog.current_database(), '",
        read_role, "'); END$$"));
    return absl::OkStatus();
  });
}

}  // namespace fencegate::postgres
