// Copyright fencegate authors.
//
// Reads the fields of one message body in order. The first failed read
// (a field running past the body's end, a string without its NUL) is kept,
// every read after it returns an empty value, and Done() reports it, so a
// parser reads all its fields and checks once. Internal to pgwire/.

#ifndef PGWIRE_WIRE_READER_H_
#define PGWIRE_WIRE_READER_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace fencegate::pgwire {

class WireReader {
 public:
  // `message` names the message in errors, e.g. "Bind".
  WireReader(absl::string_view body, absl::string_view message)
      : rest_(body), message_(message) {}

  // Each reads the next field; `field` names it in the error if the body
  // ends first. A C string is what precedes the next NUL, which is consumed.
  char Byte(absl::string_view field);
  int16_t Int16(absl::string_view field);
  uint16_t UInt16(absl::string_view field);
  int32_t Int32(absl::string_view field);
  absl::string_view CString(absl::string_view field);
  absl::string_view Bytes(size_t n, absl::string_view field);
  // The bytes not read yet, all consumed.
  absl::string_view Rest();

  size_t remaining() const { return rest_.size(); }
  bool ok() const { return status_.ok(); }

  // Fails the message with `why` unless a read failed already.
  void Fail(absl::string_view why);

  // The first failure; else INVALID_ARGUMENT if bytes are left unread;
  // else OK. Every error starts "malformed <message> message: ".
  absl::Status Done() const;

 private:
  bool Take(size_t n, absl::string_view field, absl::string_view* out);

  absl::string_view rest_;
  absl::string_view message_;
  absl::Status status_;
};

}  // namespace fencegate::pgwire

#endif  // PGWIRE_WIRE_READER_H_
