// Copyright fencegate authors.
//
// The stale-token error: FAILED_PRECONDITION carrying a machine-readable
// fencegate.v1.StaleToken payload, which the gateway turns into a
// google.rpc.Status detail.

#ifndef COMMON_STALE_TOKEN_H_
#define COMMON_STALE_TOKEN_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace fencegate {

// Type URL of the payload, as google.protobuf.Any would spell it.
inline constexpr absl::string_view kStaleTokenTypeUrl =
    "type.googleapis.com/fencegate.v1.StaleToken";

// FAILED_PRECONDITION: `token` is lower than the domain's `highest`.
absl::Status StaleTokenError(absl::string_view domain, uint64_t token,
                             uint64_t highest);

struct StaleTokenInfo {
  std::string domain;
  uint64_t token = 0;
  uint64_t highest_token = 0;
};

// The payload of a StaleTokenError, or nullopt for any other status.
std::optional<StaleTokenInfo> GetStaleToken(const absl::Status& status);

}  // namespace fencegate

#endif  // COMMON_STALE_TOKEN_H_
