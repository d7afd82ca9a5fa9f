// Copyright fencegate authors.
//
// The messages a PostgreSQL server sends, parsed from a frame (frame.h) and
// written back. The gateway reads them from its upstream connections (to
// learn a session's transaction status, its backend key, its errors) and
// writes some of its own to clients (errors, ReadyForQuery, the answer to
// SHOW fencegate.token). Parsing is as strict as frontend.h's, and what
// parses is written back by Encode() byte for byte.
//
// Views in the parsed messages point into the frame's body and are valid
// while it is.

#ifndef PGWIRE_BACKEND_H_
#define PGWIRE_BACKEND_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pgwire/frame.h"
#include "pgwire/frontend.h"

namespace fencegate::pgwire {

// 'R': an authentication request or its outcome. `code` 0 is
// AuthenticationOk, 3 a cleartext password, 5 MD5 (`data` the salt), 10
// SASL (`data` the mechanisms), 11 SASL continue, 12 SASL final.
struct Authentication {
  int32_t code = 0;
  absl::string_view data;
};
// 'K': the key that cancels this session's queries.
struct BackendKeyData {
  int32_t process_id = 0;
  int32_t secret_key = 0;
};
// 'S': a run-time parameter's value (server_version, TimeZone, ...).
struct ParameterStatus {
  absl::string_view name;
  absl::string_view value;
};
// 'Z': the server waits for a query; `status` is where the session is.
enum class TransactionStatus : char {
  kIdle = 'I',
  kInTransaction = 'T',
  kFailed = 'E',
};
struct ReadyForQuery {
  TransactionStatus status = TransactionStatus::kIdle;
};
// The fields of an error or a notice: a code byte ('S' severity, 'C'
// SQLSTATE, 'M' message, 'D' detail, 'H' hint, ...) and its text, in order.
struct NoticeFields {
  std::vector<std::pair<char, absl::string_view>> fields;
  // The first field with `code`, or nullptr.
  const absl::string_view* Find(char code) const;
};
struct ErrorResponse : NoticeFields {};   // 'E'
struct NoticeResponse : NoticeFields {};  // 'N'
// 'C': a statement's command tag ("UPDATE 3").
struct CommandComplete {
  absl::string_view tag;
};
// 'T': the columns of the rows that follow.
struct Column {
  absl::string_view name;
  uint32_t table_oid = 0;
  int16_t column = 0;
  uint32_t type_oid = 0;
  int16_t type_size = 0;
  int32_t type_modifier = 0;
  int16_t format = 0;  // 0 text, 1 binary
};
struct RowDescription {
  std::vector<Column> columns;
};
// 'D': one row; nullopt is NULL.
struct DataRow {
  std::vector<std::optional<absl::string_view>> values;
};
// 't': the types of a prepared statement's parameters.
struct ParameterDescription {
  std::vector<uint32_t> types;
};
// 'G', 'H', 'W': COPY FROM STDIN, COPY TO STDOUT, or both ways begins.
struct CopyResponse {
  enum class Direction : char { kIn = 'G', kOut = 'H', kBoth = 'W' };
  Direction direction = Direction::kIn;
  int8_t format = 0;  // 0 text, 1 binary
  std::vector<int16_t> column_formats;
};
// 'A': a NOTIFY from another session.
struct NotificationResponse {
  int32_t process_id = 0;
  absl::string_view channel;
  absl::string_view payload;
};
// 'v': the server speaks an older minor version and ignores these options.
struct NegotiateProtocolVersion {
  int32_t newest_minor = 0;
  std::vector<absl::string_view> unrecognized;
};
// Messages with no fields.
struct ParseComplete {};       // '1'
struct BindComplete {};        // '2'
struct CloseComplete {};       // '3'
struct NoData {};              // 'n'
struct PortalSuspended {};     // 's'
struct EmptyQueryResponse {};  // 'I'

using BackendMessage =
    std::variant<Authentication, BackendKeyData, ParameterStatus, ReadyForQuery,
                 ErrorResponse, NoticeResponse, CommandComplete, RowDescription,
                 DataRow, ParameterDescription, CopyResponse, CopyData,
                 CopyDone, NotificationResponse, NegotiateProtocolVersion,
                 ParseComplete, BindComplete, CloseComplete, NoData,
                 PortalSuspended, EmptyQueryResponse>;

// Parses a frame of a server's stream. INVALID_ARGUMENT for the faults
// frontend.h lists, an unknown ReadyForQuery status or COPY direction,
// and a type byte that is no backend message (FunctionCallResponse 'V'
// included: the gateway sends no FunctionCall).
absl::StatusOr<BackendMessage> ParseBackendMessage(const Frame& frame);

// The message with its type and length.
std::string Encode(const BackendMessage& message);

// An ErrorResponse ('E') from the gateway itself: severity ERROR or FATAL,
// a SQLSTATE, a message, and optionally a detail; encoded.
std::string EncodeError(absl::string_view severity, absl::string_view sqlstate,
                        absl::string_view message,
                        absl::string_view detail = {});

}  // namespace fencegate::pgwire

#endif  // PGWIRE_BACKEND_H_
