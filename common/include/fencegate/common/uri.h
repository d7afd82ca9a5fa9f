// Copyright fencegate authors.
//
// A minimal parser for adapter URIs: scheme://authority/path?query.

#ifndef FENCEGATE_COMMON_URI_H_
#define FENCEGATE_COMMON_URI_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fencegate {

struct Uri {
  // The full text.
  std::string text;
  // The text with any password replaced by "***": use it in messages.
  std::string redacted;
  // Lower-case scheme, e.g. "file", "postgres".
  std::string scheme;
  // Between "//" and the next '/', '?' or end; may be empty.
  std::string authority;
  // From the '/' after the authority up to '?'; may be empty.
  std::string path;
  // After '?', without it; may be empty.
  std::string query;
};

// Parses `text`. INVALID_ARGUMENT, quoting `text`, if it has no
// "scheme://" prefix or the scheme has characters other than letters,
// digits, '+', '-' and '.'.
absl::StatusOr<Uri> ParseUri(absl::string_view text);

// `text` with the password of "scheme://user:password@host", and the value
// of every query parameter whose name ends in "password" (libpq's password,
// a PostgreSQL route's read_password), replaced by "***". Other text is
// returned unchanged.
std::string RedactUri(absl::string_view text);

}  // namespace fencegate

#endif  // FENCEGATE_COMMON_URI_H_
