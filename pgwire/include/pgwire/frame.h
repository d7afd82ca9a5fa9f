// Copyright fencegate authors.
//
// PostgreSQL protocol v3 framing: where one message ends in a byte stream.
//
// A connection's first message (StartupMessage, SSLRequest, GSSENCRequest,
// CancelRequest) is an int32 length, counting itself, then the body. Every
// later message, in both directions, is a type byte, an int32 length
// counting itself but not the type byte, then the body. All integers are
// big-endian.
//
// These functions only split; the bodies are parsed by startup.h,
// frontend.h and backend.h. They hold no state and never block.

#ifndef PGWIRE_FRAME_H_
#define PGWIRE_FRAME_H_

#include <cstddef>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fencegate::pgwire {

// The longest startup-phase packet accepted: PostgreSQL's own limit
// (MAX_STARTUP_PACKET_LENGTH).
inline constexpr size_t kMaxStartupPacketBytes = 10000;

// Bytes before a startup packet's body (its length) and before any later
// message's body (its type and length).
inline constexpr size_t kStartupHeaderBytes = 4;
inline constexpr size_t kHeaderBytes = 5;

// One whole message at the start of a buffer.
struct Frame {
  // The type byte; '\0' for a startup-phase packet, which has none.
  char type = '\0';
  // What follows the length; points into the buffer that was split.
  absl::string_view body;
  // The bytes of the buffer the message takes, its header included.
  size_t size = 0;
};

// Splits the startup-phase packet at the start of `input`:
// - the whole packet: its frame;
// - only part of one: std::nullopt (read more and call again);
// - INVALID_ARGUMENT: a length below 8 (a packet holds its length and a
//   4-byte code at least);
// - RESOURCE_EXHAUSTED: a length above kMaxStartupPacketBytes.
// Both errors are decided from the first four bytes, before the body is read.
absl::StatusOr<std::optional<Frame>> NextStartupFrame(absl::string_view input);

// Splits the message at the start of `input`, as NextStartupFrame does:
// the frame, std::nullopt for part of one, INVALID_ARGUMENT for a length
// below 4, RESOURCE_EXHAUSTED for a message of more than
// `max_message_bytes` in all (its header included). The type byte is not
// checked here: what it may be depends on the direction (frontend.h,
// backend.h).
absl::StatusOr<std::optional<Frame>> NextFrame(absl::string_view input,
                                               size_t max_message_bytes);

}  // namespace fencegate::pgwire

#endif  // PGWIRE_FRAME_H_
