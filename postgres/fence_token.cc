// Copyright fencegate authors.

#include "postgres/fence_token.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "postgres/fence_schema.h"

namespace fencegate::postgres {

absl::Status CheckFenceToken(uint64_t token, absl::string_view what) {
  if (token <= kMaxFenceToken) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " ", token,
                   " does not fit PostgreSQL's bigint fence column (at most ",
                   kMaxFenceToken, ")"));
}

std::optional<uint64_t> StaleHeldToken(absl::string_view sqlstate,
                                       const char* detail) {
  uint64_t held = 0;
  if (sqlstate != kStaleSqlState || detail == nullptr ||
      !absl::SimpleAtoi(detail, &held)) {
    return std::nullopt;
  }
  return held;
}

}  // namespace fencegate::postgres
