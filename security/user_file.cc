// Copyright fencegate authors.

#include "security/user_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace fencegate {
namespace {

// The quoted fields of `line`, or an error saying what is wrong.
absl::StatusOr<std::vector<std::string>> QuotedFields(absl::string_view line) {
  std::vector<std::string> fields;
  size_t i = 0;
  while (true) {
    while (i < line.size() && absl::ascii_isspace(line[i])) ++i;
    if (i == line.size()) return fields;
    if (line[i] != '"') {
      return absl::InvalidArgumentError(
          absl::StrCat("expected a field in double quotes at column ", i + 1));
    }
    std::string field;
    for (++i;; ++i) {
      if (i == line.size()) {
        return absl::InvalidArgumentError("a field's closing quote is missing");
      }
      if (line[i] == '"') {
        if (i + 1 < line.size() && line[i + 1] == '"') {
          field.push_back('"');
          ++i;
          continue;
        }
        ++i;
        break;
      }
      field.push_back(line[i]);
    }
    fields.push_back(std::move(field));
  }
}

}  // namespace

absl::StatusOr<UserFile> UserFile::Parse(absl::string_view text,
                                         absl::string_view source) {
  UserFile file;
  int number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == ';' || line[0] == '#') continue;
    auto fail = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ":", number, ": ", why));
    };
    absl::StatusOr<std::vector<std::string>> fields = QuotedFields(line);
    if (!fields.ok()) return fail(fields.status().message());
    if (fields->size() != 2) {
      return fail(absl::StrCat("expected \"user\" \"verifier\", found ",
                               fields->size(), " fields"));
    }
    const std::string& user = (*fields)[0];
    if (user.empty()) return fail("the user is empty");
    absl::StatusOr<ScramVerifier> verifier = ParseScramVerifier((*fields)[1]);
    if (!verifier.ok()) {
      return fail(
          absl::StrCat("user \"", user, "\": ", verifier.status().message()));
    }
    if (!file.users_.emplace(user, *std::move(verifier)).second) {
      return fail(absl::StrCat("user \"", user, "\" is listed twice"));
    }
  }
  return file;
}

absl::StatusOr<UserFile> UserFile::Load(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    const int err = errno;
    std::string why = absl::StrCat("cannot read the user file ", path, ": ",
                                   std::strerror(err));
    return err == EACCES ? absl::PermissionDeniedError(why)
                         : absl::NotFoundError(why);
  }
  std::stringstream text;
  text << in.rdbuf();
  return Parse(text.str(), path);
}

const ScramVerifier* UserFile::Find(absl::string_view user) const {
  auto it = users_.find(user);
  return it == users_.end() ? nullptr : &it->second;
}

}  // namespace fencegate
