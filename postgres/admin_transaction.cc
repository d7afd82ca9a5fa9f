// Copyright fencegate authors.

#include "postgres/admin_transaction.h"

#include <exception>
#include <memory>

#include "absl/strings/str_cat.h"
#include "postgres/fence_schema.h"
#include "pqxx/connection"
#include "pqxx/except"
#include "pqxx/result"

namespace fencegate::postgres {
namespace {

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

absl::Status CheckName(absl::string_view what, const std::string& name) {
  if (IsPlainIdentifier(name)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      what, " \"", name,
      "\": use 1-63 lower-case letters, digits and _, not starting with a "
      "digit"));
}

absl::Status InAdminTransaction(
    const std::string& admin_conninfo,
    absl::FunctionRef<absl::Status(pqxx::work&)> body) {
  std::unique_ptr<pqxx::connection> c;
  try {
    c = std::make_unique<pqxx::connection>(admin_conninfo);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("pg-setup: cannot connect: ", Trim(e.what())));
  }
  try {
    pqxx::work tx(*c);
    if (absl::Status s = body(tx); !s.ok()) return s;
    tx.commit();
  } catch (const pqxx::broken_connection& e) {
    return absl::UnavailableError(
        absl::StrCat("pg-setup: connection lost: ", Trim(e.what())));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("pg-setup: ", Trim(e.what())));
  }
  return absl::OkStatus();
}

bool RoleExists(pqxx::work& tx, const std::string& role) {
  return !tx.exec_params("SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = $1",
                         role)
              .empty();
}

}  // namespace fencegate::postgres
