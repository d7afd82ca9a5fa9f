// Copyright fencegate authors.
//
// CatalogNames: which of the names a statement calls (Callees,
// sql_classifier.h) PostgreSQL may resolve to code outside pg_catalog -- an
// application's helper function or operator, into which the classifier
// cannot see, and which may change the session (set_config('DateStyle',
// ...)) for whatever runs after it on the connection. The gRPC route sends
// a Write that calls one last in its batch, so that the session's reported
// settings are checked (the tripwire) before another caller's Write runs
// there (docs/security.md, rule 1).
//
// Fail closed: a function name counts as pg_catalog's only if pg_catalog
// defines it and no other schema does, and any name qualified with another
// schema counts as outside. The names are read when a connection opens: a
// function created later under a new name is outside (its name is not
// pg_catalog's); one created later under a name pg_catalog also has is
// seen only from the next connection on.
//
// Thread safety: CatalogNames is immutable once read; the functions are
// pure.

#ifndef POSTGRES_CATALOG_NAMES_H_
#define POSTGRES_CATALOG_NAMES_H_

#include <libpq-fe.h>

#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "postgres/sql_classifier.h"

namespace fencegate::postgres {

struct CatalogNames {
  // Function names that PostgreSQL itself defines in pg_catalog (OIDs
  // below 16384) and that no other schema (nor a later function in
  // pg_catalog) does.
  absl::flat_hash_set<std::string> catalog_only_functions;
  // Function names some schema other than pg_catalog defines.
  absl::flat_hash_set<std::string> other_functions;
  // Operator names some schema other than pg_catalog defines.
  absl::flat_hash_set<std::string> other_operators;
};

// Reads them on `conn` (blocking, in blocking mode, outside a transaction
// block). UNAVAILABLE with the server's message if the query fails.
absl::StatusOr<CatalogNames> ReadCatalogNames(PGconn* conn);

// True if `callees` may run code outside pg_catalog: a function whose name
// is not pg_catalog's only, a field (x.f) or operator that another schema
// defines, a schema-qualified name outside pg_catalog, or a comparison made
// without naming an operator where some schema other than pg_catalog
// defines operators (an extension's type may resolve to them). With
// `names` null (not read yet), any name or comparison counts.
bool CallsOutsideCatalog(const Callees& callees, const CatalogNames* names);

}  // namespace fencegate::postgres

#endif  // POSTGRES_CATALOG_NAMES_H_
