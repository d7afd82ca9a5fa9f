// Copyright fencegate authors.
//
// Fuzzes the PostgreSQL protocol decoder (pgwire/) with whole streams: the
// first byte picks the direction (even: a client's stream, its startup
// packets first; odd: a server's), the rest is split with NextStartupFrame
// and NextFrame and each frame parsed. Checks, beyond "no crash, no UB, no
// leak":
//   - a frame lies inside the input, and its size is its header and body;
//   - a refused frame or message is INVALID_ARGUMENT or RESOURCE_EXHAUSTED;
//   - every message that parses is written back byte for byte, so that a
//     parser never accepts what it cannot represent;
//   - startup options that parse read back the same after being written.

#include <cstdint>
#include <optional>
#include <string>
#include <variant>

#include "absl/strings/string_view.h"
#include "pgwire/backend.h"
#include "pgwire/frame.h"
#include "pgwire/frontend.h"
#include "pgwire/startup.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

namespace pgwire = fencegate::pgwire;

constexpr size_t kMaxMessageBytes = 1 << 16;

bool RefusedAsDocumented(const absl::Status& s) {
  return s.code() == absl::StatusCode::kInvalidArgument ||
         s.code() == absl::StatusCode::kResourceExhausted;
}

void CheckFrame(const pgwire::Frame& f, absl::string_view input,
                size_t header) {
  FG_FUZZ_CHECK(f.size <= input.size());
  FG_FUZZ_CHECK(f.size == header + f.body.size());
  FG_FUZZ_CHECK(f.body.data() == input.data() + header);
}

// The startup packets: SSLRequest and GSSENCRequest are followed by another.
// Returns the bytes after them, or nullopt when the stream ends there.
std::optional<absl::string_view> ClientStartup(absl::string_view in) {
  for (int packets = 0; packets < 3; ++packets) {
    absl::StatusOr<std::optional<pgwire::Frame>> f =
        pgwire::NextStartupFrame(in);
    if (!f.ok()) {
      FG_FUZZ_CHECK(RefusedAsDocumented(f.status()));
      return std::nullopt;
    }
    if (!f->has_value()) return std::nullopt;
    CheckFrame(**f, in, pgwire::kStartupHeaderBytes);
    FG_FUZZ_CHECK((*f)->size <= pgwire::kMaxStartupPacketBytes);
    absl::StatusOr<pgwire::StartupPacket> p =
        pgwire::ParseStartupPacket((*f)->body);
    if (!p.ok()) {
      FG_FUZZ_CHECK(RefusedAsDocumented(p.status()));
      return std::nullopt;
    }
    FG_FUZZ_CHECK(pgwire::EncodeStartupPacket(*p) == in.substr(0, (*f)->size));
    in.remove_prefix((*f)->size);
    if (const auto* m = std::get_if<pgwire::StartupMessage>(&*p)) {
      FG_FUZZ_CHECK(m->Find("user") != nullptr);
      if (const absl::string_view* options = m->Find("options")) {
        auto parsed = pgwire::ParseStartupOptions(*options);
        if (parsed.ok()) {
          auto again = pgwire::ParseStartupOptions(
              pgwire::EncodeStartupOptions(*parsed));
          FG_FUZZ_CHECK(again.ok() && *again == *parsed);
        } else {
          FG_FUZZ_CHECK(RefusedAsDocumented(parsed.status()));
        }
      }
      return in;
    }
    if (std::holds_alternative<pgwire::CancelRequest>(*p)) return std::nullopt;
  }
  return std::nullopt;
}

template <typename Message>
void Messages(absl::string_view in,
              absl::StatusOr<Message> (*parse)(const pgwire::Frame&)) {
  while (true) {
    absl::StatusOr<std::optional<pgwire::Frame>> f =
        pgwire::NextFrame(in, kMaxMessageBytes);
    if (!f.ok()) {
      FG_FUZZ_CHECK(RefusedAsDocumented(f.status()));
      return;
    }
    if (!f->has_value()) return;
    CheckFrame(**f, in, pgwire::kHeaderBytes);
    FG_FUZZ_CHECK((*f)->size <= kMaxMessageBytes);
    absl::StatusOr<Message> m = parse(**f);
    if (m.ok()) {
      FG_FUZZ_CHECK(pgwire::Encode(*m) == in.substr(0, (*f)->size));
      if constexpr (std::is_same_v<Message, pgwire::FrontendMessage>) {
        if (const auto* p = std::get_if<pgwire::PasswordMessage>(&*m)) {
          auto sasl = pgwire::ParseSaslInitialResponse(*p);
          FG_FUZZ_CHECK(sasl.ok() || RefusedAsDocumented(sasl.status()));
        }
      }
    } else {
      FG_FUZZ_CHECK(RefusedAsDocumented(m.status()));
    }
    in.remove_prefix((*f)->size);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    if (std::optional<absl::string_view> rest = ClientStartup(in)) {
      Messages<pgwire::FrontendMessage>(*rest, pgwire::ParseFrontendMessage);
    }
  } else {
    Messages<pgwire::BackendMessage>(in, pgwire::ParseBackendMessage);
  }
  return 0;
}
