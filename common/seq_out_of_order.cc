// Copyright fencegate authors.

#include "fencegate/common/seq_out_of_order.h"

#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "fencegate/v1/errors.pb.h"

namespace fencegate {

absl::Status SeqOutOfOrderError(absl::string_view domain, uint64_t token,
                                uint64_t seq, uint64_t last_seq) {
  absl::Status status = absl::FailedPreconditionError(
      absl::StrCat("seq ", seq, " of token ", token, " for domain \"", domain,
                   "\" is out of order: seq ", last_seq,
                   " of that token was applied after it; nothing applied"));
  v1::SeqOutOfOrder detail;
  detail.set_domain(std::string(domain));
  detail.set_token(token);
  detail.set_seq(seq);
  detail.set_last_seq(last_seq);
  status.SetPayload(kSeqOutOfOrderTypeUrl,
                    absl::Cord(detail.SerializeAsString()));
  return status;
}

std::optional<SeqOutOfOrderInfo> GetSeqOutOfOrder(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kFailedPrecondition) {
    return std::nullopt;
  }
  absl::optional<absl::Cord> payload = status.GetPayload(kSeqOutOfOrderTypeUrl);
  if (!payload.has_value()) return std::nullopt;
  v1::SeqOutOfOrder detail;
  if (!detail.ParseFromString(std::string(*payload))) return std::nullopt;
  return SeqOutOfOrderInfo{detail.domain(), detail.token(), detail.seq(),
                           detail.last_seq()};
}

}  // namespace fencegate
