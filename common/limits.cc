// Copyright fencegate authors.

#include "fencegate/common/limits.h"

#include "absl/strings/str_cat.h"
#include "google/protobuf/stubs/common.h"

namespace fencegate {

absl::Status ValidateDomain(absl::string_view domain, absl::string_view field) {
  if (domain.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": must not be empty"));
  }
  if (domain.size() > kMaxDomainBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", domain.size(), " bytes is longer than the ",
                     kMaxDomainBytes, "-byte limit"));
  }
  if (domain.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": must not contain NUL bytes"));
  }
  return ValidateUtf8(domain, field);
}

absl::Status ValidateRequestId(absl::string_view request_id) {
  return ValidateText(request_id, "request_id", kMaxRequestIdBytes);
}

absl::Status ValidateText(absl::string_view value, absl::string_view field,
                          size_t max_bytes) {
  if (value.size() > max_bytes) {
    // The value itself is left out: it may be huge.
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", value.size(),
                                                   " bytes exceed the ",
                                                   max_bytes, "-byte limit"));
  }
  return ValidateUtf8(value, field);
}

absl::Status ValidateUtf8(absl::string_view value, absl::string_view field) {
  if (google::protobuf::internal::IsStructurallyValidUTF8(
          value.data(), static_cast<int>(value.size()))) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": not valid UTF-8 (send binary data as bytes)"));
}

absl::Status ValidateToken(uint64_t token, absl::string_view field) {
  if (token == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        field,
        ": must be at least 1 (0 is the unset value; pass the token "
        "your lock service granted)"));
  }
  return absl::OkStatus();
}

}  // namespace fencegate
