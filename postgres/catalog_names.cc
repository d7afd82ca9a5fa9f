// Copyright fencegate authors.

#include "postgres/catalog_names.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace fencegate::postgres {
namespace {

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using Result = std::unique_ptr<PGresult, ResultDeleter>;

// The first column of `sql`'s rows, into `out`.
absl::Status ReadNames(PGconn* conn, const char* sql,
                       absl::flat_hash_set<std::string>* out) {
  Result result(PQexec(conn, sql));
  if (result == nullptr || PQresultStatus(result.get()) != PGRES_TUPLES_OK) {
    std::string message = result == nullptr
                              ? PQerrorMessage(conn)
                              : PQresultErrorMessage(result.get());
    absl::StripTrailingAsciiWhitespace(&message);
    return absl::UnavailableError(absl::StrCat(
        "postgres: reading the catalog's function names: ", message));
  }
  const int rows = PQntuples(result.get());
  out->reserve(static_cast<size_t>(rows));
  for (int i = 0; i < rows; ++i) {
    out->emplace(PQgetvalue(result.get(), i, 0),
                 static_cast<size_t>(PQgetlength(result.get(), i, 0)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CatalogNames> ReadCatalogNames(PGconn* conn) {
  CatalogNames names;
  // A function of PostgreSQL's own has an OID below 16384
  // (FirstNormalObjectId): one an extension or a superuser later put in
  // pg_catalog does not count as pg_catalog's.
  if (absl::Status s = ReadNames(
          conn,
          "SELECT proname FROM pg_catalog.pg_proc GROUP BY proname HAVING "
          "bool_and(pronamespace = 'pg_catalog'::pg_catalog.regnamespace "
          "AND oid < 16384)",
          &names.catalog_only_functions);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          ReadNames(conn,
                    "SELECT DISTINCT proname FROM pg_catalog.pg_proc WHERE "
                    "pronamespace <> 'pg_catalog'::pg_catalog.regnamespace",
                    &names.other_functions);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          ReadNames(conn,
                    "SELECT DISTINCT oprname FROM pg_catalog.pg_operator WHERE "
                    "oprnamespace <> 'pg_catalog'::pg_catalog.regnamespace",
                    &names.other_operators);
      !s.ok()) {
    return s;
  }
  return names;
}

bool CallsOutsideCatalog(const Callees& callees, const CatalogNames* names) {
  if (callees.qualified) return true;
  if (names == nullptr) {
    return !callees.functions.empty() || !callees.fields.empty() ||
           !callees.operators.empty() || callees.implicit_operators;
  }
  for (const std::string& f : callees.functions) {
    if (!names->catalog_only_functions.contains(f)) return true;
  }
  for (const std::string& f : callees.fields) {
    if (names->other_functions.contains(f)) return true;
  }
  for (const std::string& op : callees.operators) {
    if (names->other_operators.contains(op)) return true;
  }
  // A comparison no name makes may resolve to any operator of its types.
  return callees.implicit_operators && !names->other_operators.empty();
}

}  // namespace fencegate::postgres
