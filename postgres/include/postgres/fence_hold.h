// Copyright fencegate authors.
//
// The fence a server connection holds (docs/pgwire.md, "The fence a
// connection holds"): what PostgreSQL itself enforces for every
// transaction of a PostgreSQL-port session, whatever its client sends and
// however it pipelines.
//
// A connection serving domain D at token T holds a session-level SHARED
// advisory lock on D, in a key space of fencegate's own (first key
// kHoldLockKey, second the domain's hashtext), taken by
//
//   <schema>.hold(domain text, token bigint, secret text) RETURNS bigint
//
// which raises the domain's fence row to `token` if it is lower (the
// gateway admitted the token before the call; the raise waits for holders as
// every raise does), returns the row, and keeps the lock only when the row
// holds exactly `token`: a higher row (stale) leaves nothing held. A raise of D
// -- fence(), fence_seq() or fence_next() moving the row to a higher token,
// whoever calls them -- first takes D's lock EXCLUSIVELY for its transaction:
// it waits until every connection that holds D has given it up, so that no
// transaction at the old token can run, or commit, after the raise. Gateways
// see the waiting raise (<schema>.raises_waiting()) and give D up on
// their idle connections at once; a raise that still waits after
// `raise_wait_ms` ends the backends that hold D (pg_terminate_backend, as
// the schema's owner, a member of pg_signal_backend), which rolls back
// their transactions, then takes the lock. That is the bound a paused or
// cut-off gateway can hold a raise for.
//
// Only the gateway moves a fence on such a connection: fence(), fence_seq()
// and fence_next() refuse an armed backend (42501), whatever the SQL that
// reaches them (a function of the application's, dynamic SQL), so that a
// port session's client can neither raise another domain's fence nor hold
// another domain's row locked. Only the gateway can hold: the first hold()
// on a backend arms it with a
// secret (its hash kept in <schema>.holders, an unlogged table, and the
// backend marked by a session lock of key kArmLockKey), and every later one
// must bring the same secret. The gateway sends it as a Bind parameter, so
// that no session's pg_stat_activity shows it, and arms each connection
// before its client's first message. The client cannot release the lock:
// pg_advisory_unlock*() are revoked from its role (pg-setup
// --revoke_session_functions, required by the port) and the port refuses
// DISCARD ALL, which PostgreSQL refuses inside a function or transaction
// block. The gateway releases by ending the connection's session (DISCARD
// ALL at the session's end, or closing the connection), or, when a session
// changes its token, with <schema>.release(domain, secret).
//
// Thread safety: pure functions.

#ifndef POSTGRES_FENCE_HOLD_H_
#define POSTGRES_FENCE_HOLD_H_

#include <cstdint>
#include <string>
#include <vector>

namespace fencegate::postgres {

// The first key of the domain locks: "fenc" in ASCII.
inline constexpr int32_t kHoldLockKey = 0x66656e63;
// The first key of the lock that marks an armed backend: "fgar".
inline constexpr int32_t kArmLockKey = 0x66676172;

// How long a raise waits for holders to give a domain up before it ends
// their backends, unless pg-setup is told otherwise.
inline constexpr int64_t kDefaultRaiseWaitMs = 10000;

// The version of the fence schema that pg-setup installs: <schema>.version()
// returns it (2: the held fence; 3: hold() raises, and an armed backend may
// not call fence(), fence_seq() or fence_next(); 4: fence() at READ
// COMMITTED takes the domain's lock, shared, in place of the row's; 5:
// hold() only as its transaction's first write, FG002 otherwise, and the
// gRPC route's held fence: fence_hold() and fence_seq() with a secret).
inline constexpr int kFenceSchemaVersion = 5;
// The oldest version this gateway's PostgreSQL port serves (a version-3
// schema's fence() is slower, not less safe).
inline constexpr int kMinFenceSchemaVersion = 3;

// "SELECT "<schema>".hold($1, $2::bigint, $3)".
std::string HoldSql(const std::string& schema);
// "SELECT "<schema>".fence_hold($1, $2::bigint, $3)": a gRPC route's
// Write's check on a connection armed with secret $3 (the route's held
// fence, docs/postgres.md): fence() that also leaves domain $1 held at
// token $2 by the connection if the row held it already (one boolean
// row: true if held; false after a raise, which holds nothing).
std::string FenceHoldSql(const std::string& schema);
// "SELECT "<schema>".fence_seq($1, $2::bigint, $3::bigint, $4, $5)":
// fence_seq() on a connection armed with secret $5.
std::string FenceSeqArmedSql(const std::string& schema);
// "SELECT FROM "<schema>".release($1, $2)": the domain $1 given up by the
// connection armed with secret $2 (42501 with another secret); its row has
// no column.
std::string ReleaseSql(const std::string& schema);

// Of the domains in $1 (a text[] literal), the 1-based positions of those
// a raise waits for, joined by ',' (NULL if none): one row, one value.
std::string RaisesWaitingSql(const std::string& schema);
// The array literal of `values` for RaisesWaitingSql()'s text[] parameter.
std::string TextArrayLiteral(const std::vector<std::string>& values);

// The condition on pg_catalog.pg_proc row `p` that selects every advisory
// lock function (session and transaction level, lock, try, unlock).
std::string AdvisoryFunctionsCondition();

// The statements that create the held fence's objects (holders, hold(),
// release(), await_holders(), armed(), raises_waiting(), version()) for
// `schema`, granting `role` what it may call, with raises waiting
// `raise_wait_ms` for holders. Part of FenceSetupSql() (fence_schema.h);
// idempotent.
std::vector<std::string> FenceHoldSetupSql(const std::string& schema,
                                           const std::string& role,
                                           int64_t raise_wait_ms);

}  // namespace fencegate::postgres

#endif  // POSTGRES_FENCE_HOLD_H_
