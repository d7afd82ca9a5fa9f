// Copyright fencegate authors.
//
// The database side of fencing: a schema (default "fencegate") owned by a
// role of its own, "<schema>_owner", holding the fence table and the
// SECURITY DEFINER functions that are the only way to it:
//
//   <schema>.fences (domain text PRIMARY KEY, token bigint > 0, updated_at,
//                    seq bigint >= 0)
//   <schema>.fence(domain text, token bigint) RETURNS bigint
//   <schema>.fence_seq(domain text, token bigint, seq bigint, hash text)
//     RETURNS bigint (and the three-argument form of earlier gateways)
//   <schema>.fence_next(domain text, at_least bigint) RETURNS bigint
//   <schema>.fences() RETURNS TABLE (domain text, token bigint)
//
// fence() raises the domain's row to `token` (locking it exclusively), or
// keeps it if equal (locking it shared: transactions of one token run side
// by side and write no new row version, and a raise waits for all of them),
// and returns the token; if the row holds a higher token it
// fails with SQLSTATE FG001 (kStaleSqlState), the database's token in the
// error's DETAIL. It must be its transaction's first write (FG002
// otherwise), which the gateway's call always is: SQL sent through a route
// cannot call it a second time to raise another domain's fence.
// A raise sets the row's seq to 0. fence_seq() is fence() for a Write
// carrying a seq (docs/fencing.md, rule 14): it locks the row exclusively
// and, for the row's own token, refuses the row's seq (FG004: applied
// already) and lower ones (FG003: out of order), the row's seq in DETAIL;
// otherwise it records (token, seq), raising the token if higher, so the
// record commits or rolls back with the Write itself.
// fence_next() raises the row to the higher of its token + 1 and
// `at_least` and returns it (first write only, as fence()): a gateway's
// lease grants and Sequence calls take their tokens from it, so gateways
// sharing the database never hand out one token twice. fences() lists
// every row, for a gateway's start-up. All four are SECURITY DEFINER.
// Route roles get USAGE on the schema and EXECUTE on the four functions,
// nothing else: no statement sent through a route can write, drop or read
// the fence table itself (and the classifier refuses calls of fence_next(),
// fence_seq() and fences() in a Write's SQL), and every name is
// schema-qualified, so no search_path can redirect the call. Direct writers
// call the same function first in each transaction (docs/postgres.md).
//
// pg-setup also takes TEMP on the database from the route role: where
// PUBLIC still holds it (PostgreSQL's default), every other login role that
// is neither a superuser nor a route role is granted it by name, then
// PUBLIC's is revoked, so that no other application loses it.
//
// `fencectl pg-setup` runs SetUpFenceSchema(); the gateway itself creates
// nothing and needs no privilege beyond its role's.

#ifndef POSTGRES_FENCE_SCHEMA_H_
#define POSTGRES_FENCE_SCHEMA_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "postgres/fence_hold.h"
#include "postgres/sqlstates.h"

namespace fencegate::postgres {

// Default: the schema of the fence table and function.
inline constexpr char kDefaultFenceSchema[] = "fencegate";

// The SQLSTATEs its functions raise: sqlstates.h.

// True for a name fencegate accepts as schema or role: 1-63 lower-case
// letters, digits and '_', not starting with a digit.
bool IsPlainIdentifier(absl::string_view name);

// The role that owns `schema`'s objects: "<schema>_owner".
std::string OwnerRole(const std::string& schema);

// "SELECT "<schema>".fence($1, $2::bigint)": the first statement of every
// Write's transaction.
std::string FenceCallSql(const std::string& schema);

// "SELECT "<schema>".fence_seq($1, $2::bigint, $3::bigint, $4)": the first
// statement of a Write with a seq; $4 is the Write's hash (hex SHA-256 of
// its path and operations).
std::string FenceSeqSql(const std::string& schema);

// "SELECT "<schema>".fence_next($1, $2::bigint)".
std::string FenceNextSql(const std::string& schema);

// "SELECT domain, token FROM "<schema>".fences()".
std::string ReadFencesSql(const std::string& schema);

// "SELECT token FROM "<schema>".fences() WHERE domain = $1": one domain's.
std::string ReadFenceSql(const std::string& schema);

// The statements SetUpFenceSchema() runs, in order, for `schema` and the
// route role `role` (both IsPlainIdentifier). Idempotent: running them again
// changes nothing but the function's body (CREATE OR REPLACE). Fences left
// in a table "public.fencegate_fences" by earlier versions are carried over,
// raising only.
std::vector<std::string> FenceSetupSql(
    const std::string& schema, const std::string& role,
    int64_t raise_wait_ms = kDefaultRaiseWaitMs);

// Connects to `admin_conninfo` (a role that may create roles and schemas,
// normally a superuser) and runs FenceSetupSql() in one transaction, under
// an advisory lock so that concurrent runs queue. INVALID_ARGUMENT for a
// bad name, NOT_FOUND if `role` does not exist, FAILED_PRECONDITION if
// `role` is the owner role, UNAVAILABLE if the server cannot be reached,
// INTERNAL for other SQL errors (with PostgreSQL's message).
absl::Status SetUpFenceSchema(const std::string& admin_conninfo,
                              const std::string& schema,
                              const std::string& role,
                              int64_t raise_wait_ms = kDefaultRaiseWaitMs);

// Functions (by name) that read or change session state, or run SQL text
// of their own: set_config, the session-level advisory lock functions,
// currval, lastval, setseed, query_to_xml*, cursor_to_xml*, ts_stat,
// ts_rewrite, lo_import, lo_export, pg_cancel_backend,
// pg_terminate_backend, connectby, xpath_table. The SQL classifier refuses
// their calls in a Write; RevokeSessionFunctions() takes them from PUBLIC.
const std::vector<std::string>& SessionStateFunctions();
// And every function whose name starts with one of these: dblink, crosstab.
const std::vector<std::string>& SessionStateFunctionPrefixes();

// The condition on pg_catalog.pg_proc row `p` that selects them (every
// schema, every overload).
std::string SessionFunctionsCondition();
// The SELECT of their signatures, "name(argtypes)", sorted.
std::string SessionFunctionsSql();

// Defence in depth behind the classifier, opt-in because it changes what
// every role of the database may call: connects to `admin_conninfo` (a
// superuser, or the functions' owner) and, in one transaction, revokes
// EXECUTE on every SessionFunctionsSql() function from PUBLIC and from the
// route role `role`, and grants it to each of `grant_to` (the roles that
// still need them, e.g. another application's; each must exist and differ
// from `role`). Returns the signatures it revoked, sorted. Idempotent.
// INVALID_ARGUMENT for a bad name, NOT_FOUND for a role that does not
// exist, UNAVAILABLE if the server cannot be reached, INTERNAL for other
// SQL errors (a role that may not revoke them, say).
absl::StatusOr<std::vector<std::string>> RevokeSessionFunctions(
    const std::string& admin_conninfo, const std::string& role,
    const std::vector<std::string>& grant_to);

}  // namespace fencegate::postgres

#endif  // POSTGRES_FENCE_SCHEMA_H_
