// Copyright fencegate authors.
//
// Validation of the values every fenced request carries: the domain and the
// token. Shared by the gateway and the token sources so that all of them
// accept exactly the same values.

#ifndef COMMON_LIMITS_H_
#define COMMON_LIMITS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace fencegate {

// Longest domain name accepted, in bytes.
inline constexpr size_t kMaxDomainBytes = 512;

// OK if `domain` is 1 to kMaxDomainBytes bytes of valid UTF-8 without NUL;
// otherwise INVALID_ARGUMENT naming the field `field` and the reason.
absl::Status ValidateDomain(absl::string_view domain,
                            absl::string_view field = "domain");

// Longest request_id accepted, in bytes.
inline constexpr size_t kMaxRequestIdBytes = 256;

// OK if `request_id` is at most kMaxRequestIdBytes bytes of valid UTF-8;
// otherwise INVALID_ARGUMENT. It only labels log lines, which must stay
// short.
absl::Status ValidateRequestId(absl::string_view request_id);

// Longest lease owner (a free-form holder description, stored with the
// lease and logged), resource name, and lease id accepted, in bytes.
inline constexpr size_t kMaxOwnerBytes = 256;
inline constexpr size_t kMaxResourceBytes = 4096;
inline constexpr size_t kMaxLeaseIdBytes = 64;

// OK if `value` is at most `max_bytes` bytes of valid UTF-8; otherwise
// INVALID_ARGUMENT naming `field` and, for a long one, its size (never the
// value itself).
absl::Status ValidateText(absl::string_view value, absl::string_view field,
                          size_t max_bytes);

// OK if `value` is valid UTF-8; otherwise INVALID_ARGUMENT naming `field`.
// The API's messages are proto2, whose parser leaves string fields
// unchecked, so that the gateway can say which field is wrong (proto3's
// parser would refuse the whole request with gRPC's own error).
absl::Status ValidateUtf8(absl::string_view value, absl::string_view field);

// OK for 1 .. 2^64-1. Token 0 is INVALID_ARGUMENT: it is protobuf's unset
// value, and accepting it would let a client that forgot its token write to
// a domain that was never fenced.
absl::Status ValidateToken(uint64_t token, absl::string_view field = "token");

}  // namespace fencegate

#endif  // COMMON_LIMITS_H_
