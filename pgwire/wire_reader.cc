// Copyright fencegate authors.

#include "pgwire/wire_reader.h"

#include "absl/strings/str_cat.h"

namespace fencegate::pgwire {

bool WireReader::Take(size_t n, absl::string_view field,
                      absl::string_view* out) {
  if (!status_.ok()) return false;
  if (rest_.size() < n) {
    Fail(absl::StrCat("its ", field, " runs past the message's end"));
    return false;
  }
  *out = rest_.substr(0, n);
  rest_.remove_prefix(n);
  return true;
}

char WireReader::Byte(absl::string_view field) {
  absl::string_view b;
  return Take(1, field, &b) ? b[0] : '\0';
}

uint16_t WireReader::UInt16(absl::string_view field) {
  absl::string_view b;
  if (!Take(2, field, &b)) return 0;
  return static_cast<uint16_t>((static_cast<uint8_t>(b[0]) << 8) |
                               static_cast<uint8_t>(b[1]));
}

int16_t WireReader::Int16(absl::string_view field) {
  return static_cast<int16_t>(UInt16(field));
}

int32_t WireReader::Int32(absl::string_view field) {
  absl::string_view b;
  if (!Take(4, field, &b)) return 0;
  uint32_t v = 0;
  for (char c : b) v = (v << 8) | static_cast<uint8_t>(c);
  return static_cast<int32_t>(v);
}

absl::string_view WireReader::CString(absl::string_view field) {
  if (!status_.ok()) return {};
  size_t end = rest_.find('\0');
  if (end == absl::string_view::npos) {
    Fail(absl::StrCat("its ", field, " has no terminating NUL"));
    return {};
  }
  absl::string_view s = rest_.substr(0, end);
  rest_.remove_prefix(end + 1);
  return s;
}

absl::string_view WireReader::Bytes(size_t n, absl::string_view field) {
  absl::string_view b;
  return Take(n, field, &b) ? b : absl::string_view();
}

absl::string_view WireReader::Rest() {
  absl::string_view r = rest_;
  rest_ = {};
  return r;
}

void WireReader::Fail(absl::string_view why) {
  if (!status_.ok()) return;
  status_ = absl::InvalidArgumentError(
      absl::StrCat("malformed ", message_, " message: ", why));
  rest_ = {};
}

absl::Status WireReader::Done() const {
  if (!status_.ok()) return status_;
  if (!rest_.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed ", message_, " message: ", rest_.size(),
                     " bytes after its last field"));
  }
  return absl::OkStatus();
}

}  // namespace fencegate::pgwire
