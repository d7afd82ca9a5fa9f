// Copyright fencegate authors.

#include "fencegate/common/uri.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace fencegate {

namespace {

// `query` ("a=1&b=2") with the value of every parameter whose name ends in
// "password" replaced by "***".
std::string RedactQuery(absl::string_view query) {
  std::string out;
  bool first = true;
  for (absl::string_view pair : absl::StrSplit(query, '&')) {
    if (!first) out.push_back('&');
    first = false;
    const size_t eq = pair.find('=');
    if (eq != absl::string_view::npos &&
        absl::EndsWith(pair.substr(0, eq), "password")) {
      absl::StrAppend(&out, pair.substr(0, eq + 1), "***");
    } else {
      absl::StrAppend(&out, pair);
    }
  }
  return out;
}

}  // namespace

std::string RedactUri(absl::string_view text) {
  size_t start = text.find("://");
  start = start == absl::string_view::npos ? 0 : start + 3;
  std::string query;
  if (const size_t q = text.find('?', start); q != absl::string_view::npos) {
    query = absl::StrCat("?", RedactQuery(text.substr(q + 1)));
    text = text.substr(0, q);
  }
  size_t end = text.find('/', start);
  if (end == absl::string_view::npos) end = text.size();
  absl::string_view authority = text.substr(start, end - start);
  size_t at = authority.rfind('@');
  size_t colon = authority.find(':');
  if (at == absl::string_view::npos || colon == absl::string_view::npos ||
      colon > at) {
    return absl::StrCat(text, query);
  }
  return absl::StrCat(text.substr(0, start + colon + 1), "***",
                      text.substr(start + at), query);
}

absl::StatusOr<Uri> ParseUri(absl::string_view text) {
  Uri uri;
  uri.text = std::string(text);
  uri.redacted = RedactUri(text);
  size_t sep = text.find("://");
  if (sep == absl::string_view::npos || sep == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("adapter URI \"", uri.redacted,
                     "\": expected scheme://..., e.g. file:///path"));
  }
  for (char c : text.substr(0, sep)) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '+' &&
        c != '-' && c != '.') {
      return absl::InvalidArgumentError(absl::StrCat(
          "adapter URI \"", uri.redacted, "\": invalid character in scheme"));
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
  if (slash != absl::string_view::npos)
    uri.path = std::string(rest.substr(slash));
  return uri;
}

}  // namespace fencegate
