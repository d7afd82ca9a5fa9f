// Copyright fencegate authors.

#include "storage_adapters/uri.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace fencegate {

absl::StatusOr<Uri> ParseUri(absl::string_view text) {
  Uri uri;
  uri.text = std::string(text);
  size_t sep = text.find("://");
  if (sep == absl::string_view::npos || sep == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "adapter URI \"", text, "\": expected scheme://..., e.g. file:///path"));
  }
  for (char c : text.substr(0, sep)) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '+' &&
        c != '-' && c != '.') {
      return absl::InvalidArgumentError(absl::StrCat(
          "adapter URI \"", text, "\": invalid character in scheme"));
    }
  }
  uri.scheme = absl::AsciiStrToLower(text.substr(0, sep));
  absl::string_view rest = text.substr(sep + 3);
  size_t q = rest.find('?');
  if (q != absl::string_view::npos) {
    uri.query = std::string(rest.substr(q + 1));
    rest = rest.substr(0, q);
  }
  size_t slash = rest.find('/');
  uri.authority = std::string(rest.substr(0, slash));
  if (slash != absl::string_view::npos) uri.path = std::string(rest.substr(slash));
  return uri;
}

}  // namespace fencegate
