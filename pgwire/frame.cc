// Copyright fencegate authors.

#include "pgwire/frame.h"

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace fencegate::pgwire {
namespace {

uint32_t ReadLength(absl::string_view four) {
  uint32_t v = 0;
  for (char c : four) v = (v << 8) | static_cast<uint8_t>(c);
  return v;
}

}  // namespace

absl::StatusOr<std::optional<Frame>> NextStartupFrame(absl::string_view input) {
  if (input.size() < kStartupHeaderBytes) return std::nullopt;
  const uint32_t length = ReadLength(input.substr(0, 4));
  if (length < 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid startup packet: its length is ", length,
                     " bytes, below the 8 of its length and code"));
  }
  if (length > kMaxStartupPacketBytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("startup packet of ", length, " bytes, over the limit of ",
                     kMaxStartupPacketBytes));
  }
  if (input.size() < length) return std::nullopt;
  return Frame{'\0', input.substr(kStartupHeaderBytes, length - 4), length};
}

absl::StatusOr<std::optional<Frame>> NextFrame(absl::string_view input,
                                               size_t max_message_bytes) {
  if (input.size() < kHeaderBytes) return std::nullopt;
  const char type = input[0];
  const uint32_t length = ReadLength(input.substr(1, 4));
  if (length < 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid message length ", length, " (type byte ",
                     static_cast<int>(static_cast<uint8_t>(type)),
                     "): it counts its own 4 bytes at least"));
  }
  // As a size_t, so that a length near 2^32 cannot wrap.
  const size_t size = size_t{1} + length;
  if (size > max_message_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "message of ", size, " bytes, over the limit of ", max_message_bytes));
  }
  if (input.size() < size) return std::nullopt;
  return Frame{type, input.substr(kHeaderBytes, size - kHeaderBytes), size};
}

}  // namespace fencegate::pgwire
