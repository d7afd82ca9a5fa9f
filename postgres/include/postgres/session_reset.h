// Copyright fencegate authors.
//
// What a pooled connection runs before its next user, after DISCARD ALL
// (both doors: the port's session pool, the gRPC route's reset after a
// dirty Write). DISCARD ALL returns every setting, prepared statement,
// cursor, temporary table, listen and advisory lock to a new session's,
// but keeps the random() generator where the last user left it: after a
// setseed(), the next user's random() would be a sequence the last one
// chose. So the generator is seeded again, from the gateway's own random
// bytes, which no client sees.
//
// Thread safety: safe from any thread.

#ifndef POSTGRES_SESSION_RESET_H_
#define POSTGRES_SESSION_RESET_H_

#include <string>

namespace fencegate::postgres {

// "SELECT pg_catalog.setseed(<a fresh seed in [-1, 1]>)": one statement, a
// query of its own (DISCARD ALL cannot share a transaction block). A role
// that may not execute setseed() (fencectl pg-setup
// --revoke_session_functions) fails it, and the caller closes the
// connection instead of reusing it; so does a statement made when no random
// bytes could be had.
std::string ReseedSql();

}  // namespace fencegate::postgres

#endif  // POSTGRES_SESSION_RESET_H_
