// Copyright fencegate authors.

#include "fencegate/common/stale_token.h"

#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "fencegate/v1/errors.pb.h"

namespace fencegate {

absl::Status StaleTokenError(absl::string_view domain, uint64_t token,
                             uint64_t highest) {
  absl::Status status = absl::FailedPreconditionError(
      absl::StrCat("stale fencing token ", token, " for domain \"", domain,
                   "\": the highest token seen is ", highest));
  v1::StaleToken detail;
  detail.set_domain(std::string(domain));
  detail.set_token(token);
  detail.set_highest_token(highest);
  status.SetPayload(kStaleTokenTypeUrl, absl::Cord(detail.SerializeAsString()));
  return status;
}

std::optional<StaleTokenInfo> GetStaleToken(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kFailedPrecondition) {
    return std::nullopt;
  }
  absl::optional<absl::Cord> payload = status.GetPayload(kStaleTokenTypeUrl);
  if (!payload.has_value()) return std::nullopt;
  v1::StaleToken detail;
  if (!detail.ParseFromString(std::string(*payload))) return std::nullopt;
  return StaleTokenInfo{detail.domain(), detail.token(),
                        detail.highest_token()};
}

}  // namespace fencegate
