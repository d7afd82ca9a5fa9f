// Copyright fencegate authors.
//
// The out-of-order error of a Write's (token, seq): FAILED_PRECONDITION
// carrying a machine-readable fencegate.v1.SeqOutOfOrder payload, which the
// gateway turns into a google.rpc.Status detail. Told apart from a stale
// token (common/stale_token.h) by its payload.

#ifndef COMMON_SEQ_OUT_OF_ORDER_H_
#define COMMON_SEQ_OUT_OF_ORDER_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace fencegate {

// Type URL of the payload, as google.protobuf.Any would spell it.
inline constexpr absl::string_view kSeqOutOfOrderTypeUrl =
    "type.googleapis.com/fencegate.v1.SeqOutOfOrder";

// FAILED_PRECONDITION: `seq` is below `last_seq`, the last one applied for
// `token` in `domain`.
absl::Status SeqOutOfOrderError(absl::string_view domain, uint64_t token,
                                uint64_t seq, uint64_t last_seq);

struct SeqOutOfOrderInfo {
  std::string domain;
  uint64_t token = 0;
  uint64_t seq = 0;
  uint64_t last_seq = 0;
};

// The payload of a SeqOutOfOrderError, or nullopt for any other status.
std::optional<SeqOutOfOrderInfo> GetSeqOutOfOrder(const absl::Status& status);

}  // namespace fencegate

#endif  // COMMON_SEQ_OUT_OF_ORDER_H_
