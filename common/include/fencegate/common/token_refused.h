// Copyright fencegate authors.
//
// The error that refuses a token no lock service granted: PERMISSION_DENIED
// with a fencegate.v1.TokenRefused detail (docs/api.md).

#ifndef COMMON_TOKEN_REFUSED_H_
#define COMMON_TOKEN_REFUSED_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "fencegate/v1/errors.pb.h"

namespace fencegate {

inline constexpr char kTokenRefusedTypeUrl[] =
    "type.googleapis.com/fencegate.v1.TokenRefused";

// PERMISSION_DENIED whose message says why, carrying the detail.
absl::Status TokenRefusedError(absl::string_view domain, uint64_t token,
                               uint64_t highest,
                               v1::TokenRefused::Reason reason, uint64_t limit);

// The detail, if `status` is a token refusal.
std::optional<v1::TokenRefused> GetTokenRefused(const absl::Status& status);

}  // namespace fencegate

#endif  // COMMON_TOKEN_REFUSED_H_
