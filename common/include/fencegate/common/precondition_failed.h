// Copyright fencegate authors.
//
// The error of a file operation whose precondition (if_absent, if_version)
// does not hold: FAILED_PRECONDITION carrying a machine-readable
// fencegate.v1.PreconditionFailed payload, which the gateway turns into a
// google.rpc.Status detail. Told apart from a stale token
// (common/stale_token.h) and an out-of-order seq (common/seq_out_of_order.h)
// by its payload.

#ifndef COMMON_PRECONDITION_FAILED_H_
#define COMMON_PRECONDITION_FAILED_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace fencegate {

// Type URL of the payload, as google.protobuf.Any would spell it.
inline constexpr absl::string_view kPreconditionFailedTypeUrl =
    "type.googleapis.com/fencegate.v1.PreconditionFailed";

struct PreconditionFailedInfo {
  std::string resource;  // "<route>/<path>".
  int op_index = 0;
  // What the operation asked for: absence, or `expected_version`.
  bool expected_absent = false;
  uint64_t expected_version = 0;
  // What the file is.
  bool exists = false;
  uint64_t version = 0;
};

// FAILED_PRECONDITION describing `info`, naming its resource; `prefix`
// starts the message (an operation's place in its Write, say).
absl::Status PreconditionFailedError(const PreconditionFailedInfo& info,
                                     absl::string_view prefix = "");

// The payload of a PreconditionFailedError, or nullopt for any other status.
std::optional<PreconditionFailedInfo> GetPreconditionFailed(
    const absl::Status& status);

}  // namespace fencegate

#endif  // COMMON_PRECONDITION_FAILED_H_
