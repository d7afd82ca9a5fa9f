// Copyright fencegate authors.
//
// A connection's first message (the body of a NextStartupFrame, frame.h),
// and the `options` startup parameter through which a client passes
// settings (libpq's `options`, PGOPTIONS).

#ifndef PGWIRE_STARTUP_H_
#define PGWIRE_STARTUP_H_

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fencegate::pgwire {

// Protocol 3.0, as a StartupMessage carries it (major << 16 | minor).
inline constexpr int32_t kProtocolVersion3 = 3 << 16;
// The codes in place of a version that make a packet another request.
inline constexpr int32_t kCancelRequestCode = 80877102;
inline constexpr int32_t kSslRequestCode = 80877103;
inline constexpr int32_t kGssEncRequestCode = 80877104;

// A session's start: the protocol version and the parameters, in the order
// sent. Views point into the frame's body.
struct StartupMessage {
  int32_t protocol_version = kProtocolVersion3;
  std::vector<std::pair<absl::string_view, absl::string_view>> parameters;

  // The value of parameter `name`, or nullptr if it was not sent.
  const absl::string_view* Find(absl::string_view name) const;
};
struct SslRequest {};
struct GssEncRequest {};
// Cancels the query running in the session the key names.
struct CancelRequest {
  int32_t process_id = 0;
  int32_t secret_key = 0;
};
using StartupPacket =
    std::variant<StartupMessage, SslRequest, GssEncRequest, CancelRequest>;

// Parses a startup-phase body. INVALID_ARGUMENT, with what is wrong, for:
// an unknown request code; a protocol major version other than 3; a
// parameter list not ended by an empty name, or with an empty or repeated
// name; a StartupMessage without `user` (PostgreSQL requires it); a
// request with bytes after its fields.
absl::StatusOr<StartupPacket> ParseStartupPacket(absl::string_view body);

// The packet with its length: what ParseStartupPacket reads back.
std::string EncodeStartupPacket(const StartupPacket& packet);

// One setting of the `options` parameter.
struct StartupOption {
  std::string name;
  std::string value;
  friend bool operator==(const StartupOption&, const StartupOption&) = default;
};

// Splits `options` as PostgreSQL's backend does: words separated by
// whitespace, a backslash taking the next character as it is. Each setting
// is `-c name=value`, `-cname=value` or `--name=value`; in its name a '-'
// is read as '_'. INVALID_ARGUMENT, naming the word, for any other switch
// (PostgreSQL's server switches such as -B are not a session's to set), a
// setting without '=', or an empty name.
absl::StatusOr<std::vector<StartupOption>> ParseStartupOptions(
    absl::string_view options);

// `-c name=value` words, with whitespace and backslashes escaped, that
// ParseStartupOptions reads back as `options`.
std::string EncodeStartupOptions(const std::vector<StartupOption>& options);

}  // namespace fencegate::pgwire

#endif  // PGWIRE_STARTUP_H_
