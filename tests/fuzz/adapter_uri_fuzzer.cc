// Copyright fencegate authors.
//
// Fuzzes adapter URIs and their query parameters: ParseUri, RedactUri and
// a PostgreSQL route's postgres::ParseRouteUri (which does not connect).
// Checks, beyond "no crash, no UB, no leak":
//   - a parsed URI's `redacted` is RedactUri of its text;
//   - a URI with a password has "***" in its place in the redacted text and
//     in the PostgreSQL options' redacted URI, and no error message quotes
//     the URI unredacted.

#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "fencegate/common/uri.h"
#include "postgres/route_options.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

// The password of "scheme://user:password@host...", or "".
std::string PasswordOf(absl::string_view text) {
  const size_t start = text.find("://");
  if (start == absl::string_view::npos) return "";
  absl::string_view rest = text.substr(start + 3);
  rest = rest.substr(0, rest.find_first_of("/?"));
  const size_t at = rest.rfind('@');
  if (at == absl::string_view::npos) return "";
  const absl::string_view userinfo = rest.substr(0, at);
  const size_t colon = userinfo.find(':');
  if (colon == absl::string_view::npos) return "";
  return std::string(userinfo.substr(colon + 1));
}

// Where a URI with a password is quoted, the password must read "***".
bool Redacted(absl::string_view quoted, const std::string& password) {
  return password.empty() || PasswordOf(quoted) == "***";
}

// An error message about a URI with a password must not quote it as is.
bool QuotesUnredacted(absl::string_view message, absl::string_view text,
                      const std::string& password) {
  return !password.empty() && password != "***" &&
         absl::StrContains(message, text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string redacted = fencegate::RedactUri(text);
  const std::string password = PasswordOf(text);
  FG_FUZZ_CHECK(Redacted(redacted, password));

  absl::StatusOr<fencegate::Uri> uri = fencegate::ParseUri(text);
  if (!uri.ok()) {
    FG_FUZZ_CHECK(!QuotesUnredacted(uri.status().message(), text, password));
    return 0;
  }
  FG_FUZZ_CHECK(uri->redacted == redacted);
  if (uri->scheme != "postgres" && uri->scheme != "postgresql") return 0;
  absl::StatusOr<fencegate::postgres::RouteOptions> options =
      fencegate::postgres::ParseRouteUri(*uri);
  if (!options.ok()) {
    FG_FUZZ_CHECK(
        !QuotesUnredacted(options.status().message(), text, password));
    return 0;
  }
  FG_FUZZ_CHECK(Redacted(options->redacted_uri, password));
  FG_FUZZ_CHECK(options->pool_size > 0);
  return 0;
}
