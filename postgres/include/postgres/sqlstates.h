// Copyright fencegate authors.
//
// Every SQLSTATE fencegate itself sends or raises, each with one meaning:
// the fence schema's functions raise them in the database (the gRPC route
// reads them back), and the PostgreSQL port sends them to its clients. The
// FG class is fencegate's own. kSqlStates lists them all with where they
// come from; docs/postgres.md lists the database's and docs/pgwire.md the
// port's (SqlStatesTest checks both, and that no code is listed twice).
//
// Thread safety: constants.

#ifndef POSTGRES_SQLSTATES_H_
#define POSTGRES_SQLSTATES_H_

namespace fencegate::postgres {

// fence(), fence_seq() or hold() refusing a token lower than the
// database's (DETAIL: the database's token); the port, a token lower than
// this gateway's fence, or a session whose domain a raise waits for.
inline constexpr char kStaleSqlState[] = "FG001";
// fence(), fence_seq() or fence_next() called after its transaction
// already wrote something: it must come first (so client SQL cannot call it
// again).
inline constexpr char kNotFirstSqlState[] = "FG002";
// fence_seq() refusing a seq below the row's for its token.
inline constexpr char kSeqOrderSqlState[] = "FG003";
// fence_seq() finding the row's own (token, seq): the Write was applied
// already, and this attempt is rolled back.
inline constexpr char kSeqAppliedSqlState[] = "FG004";
// fence_seq() finding the row's own (token, seq) recorded with another
// Write's hash: the seq names another write; nothing is applied.
inline constexpr char kSeqOtherWriteSqlState[] = "FG005";
// The port refusing a token that the domain's token rules refuse (the
// policy: a lock service that did not grant it, or past max_advance).
inline constexpr char kTokenRefusedSqlState[] = "FG006";

// PostgreSQL's own codes, with the meanings fencegate gives them.
inline constexpr char kConnectionFailureSqlState[] = "08006";
inline constexpr char kProtocolViolationSqlState[] = "08P01";
inline constexpr char kFeatureNotSupportedSqlState[] = "0A000";
inline constexpr char kInvalidParameterSqlState[] = "22023";
inline constexpr char kActiveTransactionSqlState[] = "25001";
inline constexpr char kReadOnlyTransactionSqlState[] = "25006";
inline constexpr char kIdleInTransactionSqlState[] = "25P03";
inline constexpr char kInvalidAuthorizationSqlState[] = "28000";
inline constexpr char kInvalidPasswordSqlState[] = "28P01";
inline constexpr char kInvalidCatalogNameSqlState[] = "3D000";
inline constexpr char kInsufficientPrivilegeSqlState[] = "42501";
inline constexpr char kSyntaxErrorSqlState[] = "42601";
inline constexpr char kDuplicatePreparedSqlState[] = "42P05";
inline constexpr char kOutOfMemorySqlState[] = "53200";
// A raise from a connection that holds the domain itself (fence_hold.h).
inline constexpr char kHeldHereSqlState[] = "55000";
inline constexpr char kTooManyConnectionsSqlState[] = "53300";
inline constexpr char kProgramLimitSqlState[] = "54000";
inline constexpr char kInternalErrorSqlState[] = "XX000";

// Where a code comes from.
enum class SqlStateOrigin {
  kDatabase,  // The fence schema's functions (docs/postgres.md).
  kPort,      // The PostgreSQL port (docs/pgwire.md).
  kBoth,
};

struct SqlStateEntry {
  const char* code;
  SqlStateOrigin origin;
};

inline constexpr SqlStateEntry kSqlStates[] = {
    {kStaleSqlState, SqlStateOrigin::kBoth},
    {kNotFirstSqlState, SqlStateOrigin::kDatabase},
    {kSeqOrderSqlState, SqlStateOrigin::kDatabase},
    {kSeqAppliedSqlState, SqlStateOrigin::kDatabase},
    {kSeqOtherWriteSqlState, SqlStateOrigin::kDatabase},
    {kTokenRefusedSqlState, SqlStateOrigin::kPort},
    {kConnectionFailureSqlState, SqlStateOrigin::kPort},
    {kProtocolViolationSqlState, SqlStateOrigin::kPort},
    {kFeatureNotSupportedSqlState, SqlStateOrigin::kPort},
    {kInvalidParameterSqlState, SqlStateOrigin::kBoth},
    {kActiveTransactionSqlState, SqlStateOrigin::kBoth},
    {kReadOnlyTransactionSqlState, SqlStateOrigin::kPort},
    {kIdleInTransactionSqlState, SqlStateOrigin::kPort},
    {kInvalidAuthorizationSqlState, SqlStateOrigin::kPort},
    {kInvalidPasswordSqlState, SqlStateOrigin::kPort},
    {kInvalidCatalogNameSqlState, SqlStateOrigin::kPort},
    {kInsufficientPrivilegeSqlState, SqlStateOrigin::kBoth},
    {kSyntaxErrorSqlState, SqlStateOrigin::kPort},
    {kDuplicatePreparedSqlState, SqlStateOrigin::kPort},
    {kOutOfMemorySqlState, SqlStateOrigin::kPort},
    {kHeldHereSqlState, SqlStateOrigin::kDatabase},
    {kTooManyConnectionsSqlState, SqlStateOrigin::kPort},
    {kProgramLimitSqlState, SqlStateOrigin::kPort},
    {kInternalErrorSqlState, SqlStateOrigin::kPort},
};

}  // namespace fencegate::postgres

#endif  // POSTGRES_SQLSTATES_H_
