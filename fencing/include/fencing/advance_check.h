// Copyright fencegate authors.
//
// AdvanceCheck: a caller's condition on a fence advance, beyond the rules of
// fencer.h. The gateway uses it for token authenticity (docs/security.md): a
// token that would raise a domain's fence must be one its lock service could
// have granted. Only advances are checked: a token equal to the fence was
// admitted when the fence reached it, and a lower one is stale anyway.

#ifndef FENCING_ADVANCE_CHECK_H_
#define FENCING_ADVANCE_CHECK_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "fencing/fence_store.h"

namespace fencegate {

// Thread safety: Check() may be called from any thread, never concurrently
// for one call of the Fencer.
class AdvanceCheck {
 public:
  virtual ~AdvanceCheck() = default;

  // Called in the domain's turn when `token` would raise the fence from
  // `current` (token > current.highest_token). OK admits the advance; an
  // error refuses it: the fence does not move, nothing is applied, and the
  // error is the Fencer call's result. With `may_block` false it must not
  // block, and returns nullopt if it cannot decide without blocking (the
  // Fencer then declines, and the caller retries where blocking is allowed).
  virtual std::optional<absl::Status> Check(const FenceState& current,
                                            uint64_t token,
                                            bool may_block) const = 0;
};

}  // namespace fencegate

#endif  // FENCING_ADVANCE_CHECK_H_
