// Copyright fencegate authors.
//
// The messages a client sends after its startup packet, parsed from a
// frame (frame.h) and written back. Every parser is strict: a field past
// the body's end, a string without its NUL, a count that does not match
// what follows, an out-of-range code, or bytes after the last field is
// INVALID_ARGUMENT naming the message and the field. What parses is
// written back by Encode() byte for byte.
//
// Views in the parsed messages point into the frame's body and are valid
// while it is.

#ifndef PGWIRE_FRONTEND_H_
#define PGWIRE_FRONTEND_H_

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pgwire/frame.h"

namespace fencegate::pgwire {

// 'Q': one or more statements as text.
struct Query {
  absl::string_view sql;
};
// 'P': prepares a statement ("" is the unnamed one).
struct Parse {
  absl::string_view statement;
  absl::string_view sql;
  std::vector<uint32_t> parameter_types;  // OIDs; 0 leaves one to the server
};
// 'B': binds a prepared statement's parameters into a portal.
struct Bind {
  absl::string_view portal;
  absl::string_view statement;
  // None (all text), one (for all) or one per parameter; 0 text, 1 binary.
  std::vector<int16_t> parameter_formats;
  std::vector<std::optional<absl::string_view>> parameters;  // nullopt: NULL
  std::vector<int16_t> result_formats;  // as parameter_formats, per column
};
// 'D' and 'C': what Describe and Close name.
enum class Target : char { kStatement = 'S', kPortal = 'P' };
struct Describe {
  Target target = Target::kStatement;
  absl::string_view name;
};
struct Close {
  Target target = Target::kStatement;
  absl::string_view name;
};
// 'E': runs a portal; max_rows 0 returns every row.
struct Execute {
  absl::string_view portal;
  int32_t max_rows = 0;
};
struct Sync {};       // 'S'
struct Flush {};      // 'H'
struct Terminate {};  // 'X'
// 'd', 'c', 'f': COPY FROM STDIN's data, its end, or the client giving up.
struct CopyData {
  absl::string_view data;
};
struct CopyDone {};
struct CopyFail {
  absl::string_view message;
};
// 'p': a password, or a SASL message (ParseSaslInitialResponse); which one
// depends on what the server asked for, so the body is kept as it is.
struct PasswordMessage {
  absl::string_view data;
};

using FrontendMessage =
    std::variant<Query, Parse, Bind, Describe, Close, Execute, Sync, Flush,
                 Terminate, CopyData, CopyDone, CopyFail, PasswordMessage>;

// Parses a frame of a client's stream. INVALID_ARGUMENT for the faults
// above, and for a type byte that is no frontend message or is one the
// gateway does not serve (FunctionCall 'F').
absl::StatusOr<FrontendMessage> ParseFrontendMessage(const Frame& frame);

// The message with its type and length.
std::string Encode(const FrontendMessage& message);

// The first SASL message inside a PasswordMessage: the mechanism, and the
// client's first message (nullopt when its length is -1).
struct SaslInitialResponse {
  absl::string_view mechanism;
  std::optional<absl::string_view> data;
};
absl::StatusOr<SaslInitialResponse> ParseSaslInitialResponse(
    const PasswordMessage& message);

}  // namespace fencegate::pgwire

#endif  // PGWIRE_FRONTEND_H_
