// Copyright fencegate authors.
//
// What each statement of a query string that a client sends through the
// PostgreSQL protocol port does to its session, decided by PostgreSQL's own
// parser (libpg_query, the PostgreSQL 15 grammar), never by keywords:
// where transactions begin and end; the gateway's own settings
// (fencegate.domain, fencegate.token), which the gateway answers itself and
// never sends upstream; and what would let a session without a token
// write. Statement boundaries are the parser's, so a ';' inside a string,
// a comment or a dollar-quoted body splits nothing.
//
// What parsing cannot see: a function or DO block whose body changes
// default_transaction_read_only. DO and CALL are therefore marked as
// lifting the read-only mode too; the body of a function called from a
// query is the database's to guard (pg-setup revokes the session-state
// functions, fence_schema.h).
//
// Thread safety: a pure function, safe from any thread.

#ifndef POSTGRES_SESSION_SQL_H_
#define POSTGRES_SESSION_SQL_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fencegate::postgres {

enum class SessionEffect {
  kStatement,    // runs upstream as it is
  kBegin,        // BEGIN, START TRANSACTION
  kCommit,       // COMMIT, END
  kRollback,     // ROLLBACK, ABORT (not ROLLBACK TO SAVEPOINT: kStatement)
  kGatewaySet,   // SET [SESSION] fencegate.<name> = value
  kGatewayShow,  // SHOW fencegate.<name>
  kRefused,      // never runs; `reason` says why
};

// Prepared statements and portals whose names start with it are the
// gateway's own; a client's PREPARE or DEALLOCATE of one is refused.
inline constexpr char kReservedNamePrefix[] = "fencegate_";

struct SessionStatement {
  SessionEffect effect = SessionEffect::kStatement;
  // The statement's text within the query string, without its ';'.
  absl::string_view text;
  // kGatewaySet and kGatewayShow: the name after "fencegate.", lower case
  // ("domain", "token").
  std::string setting;
  // kGatewaySet: the value as written (a number's digits, a string's text).
  std::string value;
  // kCommit, kRollback: AND CHAIN, a new transaction begins at once.
  bool chain = false;
  // kBegin: READ WRITE is asked for explicitly.
  bool read_write = false;
  // A statement that would let this or a later transaction write in a
  // session without a token: SET or RESET of default_transaction_read_only
  // or transaction_read_only, SET TRANSACTION / SESSION CHARACTERISTICS
  // ... READ WRITE, RESET ALL, DO, CALL, LOCK above ACCESS
  // SHARE, and anywhere in a statement (a PREPARE's query included) a call
  // of set_config(), of a function that runs SQL text of its own
  // (query_to_xml*, cursor_to_xml*, ts_stat, ts_rewrite, xpath_table,
  // connectby, dblink*, crosstab*) or of a large-object function (lo_*,
  // lowrite). Such a session refuses it; one with a token runs it.
  bool lifts_read_only = false;
  // kRefused: why, in words a client can act on.
  std::string reason;
};

// The statements of `sql`, in order (none for an empty string or only
// comments). Refused statements are marked, not dropped, so that the caller
// answers each in its place. INVALID_ARGUMENT with the parser's message if
// `sql` does not parse: PostgreSQL would refuse it too, and without a parse
// the gateway cannot know where its transactions begin.
//
// Refused: PREPARE TRANSACTION, COMMIT PREPARED and ROLLBACK PREPARED (a
// prepared transaction commits after its session's fence check, from any
// session); SET LOCAL, RESET and SET ... TO DEFAULT of a fencegate.*
// setting; a fencegate.* name other than domain and token; a value that is
// not one constant; PREPARE and DEALLOCATE of a kReservedNamePrefix name;
// SET of a pinned setting (below) to another value, and set_config() of
// one; set_config() whose setting name is not one constant; calls of
// pg_cancel_backend(), pg_terminate_backend() and every pg_*advisory_*
// function, anywhere in a statement; DISCARD ALL (the last two could
// release the fence the server connection holds, fence_hold.h).
absl::StatusOr<std::vector<SessionStatement>> ClassifySessionSql(
    absl::string_view sql);

// Whether setting `name` (any case) is one whose value decides whether a
// session may write: default_transaction_read_only, transaction_read_only.
// A session without a token may not set it, in its startup packet or in SQL.
bool IsReadOnlySetting(absl::string_view name);

// Settings pinned on every server session of the port, because they change
// how the server reads SQL text and the gateway must read it the same way:
// client_encoding UTF8 (libpg_query's encoding) and
// standard_conforming_strings on. `name` in lower case.
bool IsPinnedSetting(absl::string_view name);
// Whether `value` keeps pinned setting `name` as pinned: UTF8 or UNICODE
// (any case, with or without '-' or '_'); on, true, yes or 1. True for a
// name that is not pinned.
bool KeepsPin(absl::string_view name, absl::string_view value);
// Why a change of pinned setting `name` is refused, in words for a client.
std::string PinnedReason(absl::string_view name);

}  // namespace fencegate::postgres

#endif  // POSTGRES_SESSION_SQL_H_
