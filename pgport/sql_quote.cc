// Copyright fencegate authors.

#include "pgport/sql_quote.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace fencegate::pgport {

std::string QuoteIdentifier(absl::string_view name) {
  return absl::StrCat("\"", absl::StrReplaceAll(name, {{"\"", "\"\""}}), "\"");
}

std::string QuoteLiteral(absl::string_view value) {
  std::string tag = "$fg$";
  // The parser ends the body at the first occurrence of the tag, so the
  // tag must not occur in the value, nor begin in it and end in the closing
  // tag (a value ending in "$f" would close early).
  while (absl::StrContains(
      absl::StrCat(value, absl::string_view(tag).substr(0, tag.size() - 1)),
      tag)) {
    tag.insert(tag.size() - 1, "g");
  }
  return absl::StrCat(tag, value, tag);
}

}  // namespace fencegate::pgport
