// Copyright fencegate authors.
//
// Writes one protocol message: its type byte (none for a startup-phase
// packet), its length, then the fields appended in order, big-endian.

#ifndef PGWIRE_MESSAGE_BUILDER_H_
#define PGWIRE_MESSAGE_BUILDER_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace fencegate::pgwire {

class MessageBuilder {
 public:
  // `type` '\0' starts a startup-phase packet, which has no type byte.
  explicit MessageBuilder(char type);

  MessageBuilder& Byte(char b);
  MessageBuilder& Int16(int16_t v);
  MessageBuilder& Int32(int32_t v);
  // `s` and its terminating NUL. The protocol cannot carry a NUL inside a
  // string: `s` is cut at its first NUL, if it has one.
  MessageBuilder& CString(absl::string_view s);
  // `bytes` as they are (a length, if the field has one, is the caller's).
  MessageBuilder& Bytes(absl::string_view bytes);

  // The message with its length filled in. The builder is spent.
  std::string Finish();

 private:
  std::string out_;
  size_t length_at_;
};

}  // namespace fencegate::pgwire

#endif  // PGWIRE_MESSAGE_BUILDER_H_
