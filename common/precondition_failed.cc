// Copyright fencegate authors.

#include "fencegate/common/precondition_failed.h"

#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "fencegate/v1/errors.pb.h"

namespace fencegate {
namespace {

v1::PreconditionFailed ToDetail(const PreconditionFailedInfo& info) {
  v1::PreconditionFailed detail;
  detail.set_resource(info.resource);
  detail.set_op_index(info.op_index);
  if (info.expected_absent) {
    detail.set_expected_absent(true);
  } else {
    detail.set_expected_version(info.expected_version);
  }
  detail.set_exists(info.exists);
  detail.set_version(info.version);
  return detail;
}

}  // namespace

absl::Status PreconditionFailedError(const PreconditionFailedInfo& info,
                                     absl::string_view prefix) {
  const std::string actual =
      info.exists ? absl::StrCat("exists at version ", info.version)
                  : absl::StrCat("does not exist (version ", info.version, ")");
  const std::string expected =
      info.expected_absent ? std::string("if_absent")
                           : absl::StrCat("if_version ", info.expected_version);
  absl::Status status = absl::FailedPreconditionError(absl::StrCat(
      prefix, "precondition ", expected, " failed: \"", info.resource, "\" ",
      actual, "; that operation changed nothing"));
  status.SetPayload(kPreconditionFailedTypeUrl,
                    absl::Cord(ToDetail(info).SerializeAsString()));
  return status;
}

std::optional<PreconditionFailedInfo> GetPreconditionFailed(
    const absl::Status& status) {
  if (status.code() != absl::StatusCode::kFailedPrecondition) {
    return std::nullopt;
  }
  absl::optional<absl::Cord> payload =
      status.GetPayload(kPreconditionFailedTypeUrl);
  if (!payload.has_value()) return std::nullopt;
  v1::PreconditionFailed detail;
  if (!detail.ParseFromString(std::string(*payload))) return std::nullopt;
  PreconditionFailedInfo info;
  info.resource = detail.resource();
  info.op_index = detail.op_index();
  info.expected_absent = detail.has_expected_absent();
  info.expected_version = detail.expected_version();
  info.exists = detail.exists();
  info.version = detail.version();
  return info;
}

}  // namespace fencegate
