// Copyright fencegate authors.
//
// What `fencectl pg-setup`'s steps share (fence_schema.h, read_role.h): a
// name check, one transaction as the administrator, a role's existence.
// Used by the pg-setup steps in postgres/ only.
//
// Thread safety: pure functions; each call opens its own connection.

#ifndef POSTGRES_ADMIN_TRANSACTION_H_
#define POSTGRES_ADMIN_TRANSACTION_H_

#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "pqxx/transaction"

namespace fencegate::postgres {

// INVALID_ARGUMENT unless `name` is a plain identifier (IsPlainIdentifier);
// `what` names it ("schema", "role").
absl::Status CheckName(absl::string_view what, const std::string& name);

// Runs `body` in one transaction on a new connection to `admin_conninfo`,
// committed if `body` succeeds; a connection that fails is UNAVAILABLE,
// any other exception INTERNAL, each prefixed "pg-setup: ".
absl::Status InAdminTransaction(
    const std::string& admin_conninfo,
    absl::FunctionRef<absl::Status(pqxx::work&)> body);

// Whether `role` exists.
bool RoleExists(pqxx::work& tx, const std::string& role);

}  // namespace fencegate::postgres

#endif  // POSTGRES_ADMIN_TRANSACTION_H_
