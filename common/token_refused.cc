// Copyright fencegate authors.

#include "fencegate/common/token_refused.h"

#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace fencegate {

absl::Status TokenRefusedError(absl::string_view domain, uint64_t token,
                               uint64_t highest,
                               v1::TokenRefused::Reason reason,
                               uint64_t limit) {
  std::string why;
  switch (reason) {
    case v1::TokenRefused::NOT_GRANTED_BY_LEASE:
      why = absl::StrCat(
          "the domain takes its tokens from the lease service, which has "
          "granted none above ",
          limit);
      break;
    case v1::TokenRefused::ABOVE_ETCD_REVISION:
      why = absl::StrCat(
          "the domain takes its tokens from etcd, whose newest revision is ",
          limit);
      break;
    case v1::TokenRefused::ABOVE_ZOOKEEPER_ZXID:
      why = absl::StrCat(
          "the domain takes its tokens from ZooKeeper, whose newest zxid "
          "seen is ",
          limit);
      break;
    case v1::TokenRefused::NOT_ETCD_HOLDER:
    case v1::TokenRefused::NOT_ZOOKEEPER_HOLDER: {
      const char* source =
          reason == v1::TokenRefused::NOT_ETCD_HOLDER ? "etcd" : "ZooKeeper";
      why = limit == 0
                ? absl::StrCat("the domain takes its tokens from ", source,
                               ", where nobody holds its lock")
                : absl::StrCat("the domain takes its tokens from ", source,
                               ", where its lock's holder has token ", limit);
      break;
    }
    case v1::TokenRefused::ABOVE_MAX_ADVANCE:
      why = absl::StrCat("the domain's max_advance admits at most ", limit);
      break;
    default:
      why = "refused";
      break;
  }
  absl::Status status = absl::PermissionDeniedError(absl::StrCat(
      "token ", token, " refused for domain \"", absl::CHexEscape(domain),
      "\" (fence at ", highest, "): ", why, "; the fence did not move"));
  v1::TokenRefused detail;
  detail.set_domain(std::string(domain));
  detail.set_token(token);
  detail.set_highest_token(highest);
  detail.set_reason(reason);
  detail.set_limit(limit);
  status.SetPayload(kTokenRefusedTypeUrl,
                    absl::Cord(detail.SerializeAsString()));
  return status;
}

std::optional<v1::TokenRefused> GetTokenRefused(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kPermissionDenied) {
    return std::nullopt;
  }
  absl::optional<absl::Cord> payload = status.GetPayload(kTokenRefusedTypeUrl);
  if (!payload.has_value()) return std::nullopt;
  v1::TokenRefused detail;
  if (!detail.ParseFromString(std::string(*payload))) return std::nullopt;
  return detail;
}

}  // namespace fencegate
