// Copyright fencegate authors.

#include "fencing/fencer.h"

#include <limits>
#include <optional>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "fencegate/common/fatal.h"
#include "fencegate/common/stale_token.h"
#include "fencegate/common/sync_point.h"
#include "fencegate/v1/gateway.pb.h"

namespace fencegate {

Fencer::Fencer(FenceStore* store, Clock* clock, StorageFence* storage,
               DomainTurns::Runner runner)
    : store_(store),
      clock_(clock),
      storage_(storage),
      turns_(std::move(runner)) {}

Fencer::~Fencer() = default;

namespace {

// Only the domain's turn raises the domain in this process; a fence other
// than `token` after a raise means the store's state moved under us: a
// broken invariant.
void CheckRaised(absl::string_view domain, uint64_t token,
                 const FenceState& raised) {
  if (raised.highest_token == token) return;
  Fatal("fencer", absl::StrCat("raising domain \"", domain, "\" to ", token,
                               " left ", raised.highest_token));
}

constexpr char kAdvancedTypeUrl[] =
    "type.googleapis.com/fencegate.v1.FenceState";

// Rule 5: an apply error after an advance says the fence moved.
absl::Status Failed(absl::Status error, const FenceDecision& decision) {
  if (decision.advanced) {
    v1::FenceState fence;
    fence.set_domain(decision.fence.domain);
    fence.set_highest_token(decision.fence.highest_token);
    error.SetPayload(kAdvancedTypeUrl, absl::Cord(fence.SerializeAsString()));
  }
  return error;
}

}  // namespace

std::optional<uint64_t> Fencer::AdvancedBeforeError(const absl::Status& error) {
  absl::optional<absl::Cord> payload = error.GetPayload(kAdvancedTypeUrl);
  if (!payload.has_value()) return std::nullopt;
  v1::FenceState fence;
  if (!fence.ParseFromString(std::string(*payload))) return std::nullopt;
  return fence.highest_token();
}

void Fencer::ForgetAdvance(absl::Status& error) {
  error.ErasePayload(kAdvancedTypeUrl);
}

absl::StatusOr<FenceDecision> Fencer::CheckAndRecord(
    absl::string_view domain, uint64_t token, const AdvanceCheck* check) {
  absl::StatusOr<FenceState> current = store_->Get(domain);
  if (!current.ok()) return current.status();
  if (token < current->highest_token) {
    return StaleTokenError(domain, token, current->highest_token);
  }
  FENCEGATE_SYNC_POINT_ARG("Fencer::Execute:AfterCheck", &token);

  FenceDecision decision;
  if (token > current->highest_token) {
    if (absl::Status s = Admit(check, *current, token); !s.ok()) return s;
    absl::StatusOr<FenceState> raised =
        store_->Raise(domain, token, clock_->Now());
    if (!raised.ok()) return raised.status();
    CheckRaised(domain, token, *raised);
    decision.fence = *std::move(raised);
    decision.advanced = true;
  } else {
    decision.fence = *std::move(current);
  }
  return decision;
}

absl::StatusOr<FenceDecision> Fencer::Execute(
    absl::string_view domain, uint64_t token,
    absl::FunctionRef<absl::Status()> apply, const AdvanceCheck* check) {
  FENCEGATE_SYNC_POINT("Fencer::Execute:BeforeTurn");
  Turn turn = turns_.Wait(domain);
  if (absl::Status s = LearnFirst(turn, check); !s.ok()) return s;
  absl::StatusOr<FenceDecision> decision = CheckAndRecord(domain, token, check);
  if (!decision.ok()) return decision;
  FENCEGATE_SYNC_POINT_ARG("Fencer::Execute:BeforeApply", &token);
  if (absl::Status s = apply(); !s.ok()) return Failed(std::move(s), *decision);
  FENCEGATE_SYNC_POINT_ARG("Fencer::Execute:AfterApply", &token);
  return decision;
}

void Fencer::ExecuteAsync(absl::string_view domain, uint64_t token,
                          AsyncApply apply, DecisionCallback done,
                          ExecuteAsyncOptions options) {
  turns_.Queue(domain, [this, token, apply = std::move(apply),
                        done = std::move(done),
                        options = std::move(options)](Turn turn) mutable {
    if (options.cancelled && options.cancelled()) {
      turn.Release();
      std::move(done)(absl::CancelledError("cancelled before it was applied"));
      return;
    }
    const absl::Status learnt = LearnFirst(turn, options.check);
    absl::StatusOr<FenceDecision> decision =
        learnt.ok() ? CheckAndRecord(turn.domain(), token, options.check)
                    : absl::StatusOr<FenceDecision>(learnt);
    if (!decision.ok()) {
      turn.Release();
      std::move(done)(std::move(decision));
      return;
    }
    ApplyHolding(std::move(turn), token, *std::move(decision), std::move(apply),
                 std::move(done));
  });
}

bool Fencer::TryExecuteAsync(absl::string_view domain, uint64_t token,
                             AsyncApply& apply, DecisionCallback& done,
                             const AdvanceCheck* check) {
  std::optional<Turn> turn = turns_.TryTake(domain);
  if (!turn.has_value()) return false;
  std::optional<FenceState> current = store_->GetCached(domain);
  if (!current.has_value()) return false;
  if (token > current->highest_token) {
    if (!store_->RaiseAsyncNeverBlocks()) return false;
    if (check != nullptr) {
      std::optional<absl::Status> admitted =
          check->Check(*current, token, /*may_block=*/false);
      if (!admitted.has_value()) return false;
      if (!admitted->ok()) {
        turn->Release();
        std::move(done)(*std::move(admitted));
        return true;
      }
    }
    FENCEGATE_SYNC_POINT_ARG("Fencer::Execute:AfterCheck", &token);
    RaiseThenApply(*std::move(turn), token, std::move(apply), std::move(done));
    return true;
  }
  if (token < current->highest_token) {
    turn->Release();
    std::move(done)(StaleTokenError(domain, token, current->highest_token));
    return true;
  }
  FENCEGATE_SYNC_POINT_ARG("Fencer::Execute:AfterCheck", &token);
  FenceDecision decision;
  decision.fence = *std::move(current);
  ApplyHolding(*std::move(turn), token, std::move(decision), std::move(apply),
               std::move(done));
  return true;
}

void Fencer::Submit(absl::string_view domain, uint64_t token, AsyncApply apply,
                    DecisionCallback done, ExecuteAsyncOptions options) {
  if (options.apply_never_blocks &&
      TryExecuteAsync(domain, token, apply, done, options.check)) {
    return;
  }
  ExecuteAsync(domain, token, std::move(apply), std::move(done),
               std::move(options));
}

void Fencer::RunInTurn(absl::string_view domain, DomainTurns::Work work) {
  turns_.Queue(domain, std::move(work));
}

Fencer::Turn Fencer::WaitTurn(absl::string_view domain) {
  return turns_.Wait(domain);
}

void Fencer::RaiseThenApply(Turn turn, uint64_t token, AsyncApply apply,
                            DecisionCallback done) {
  const std::string domain = turn.domain();
  store_->RaiseAsync(
      domain, token, clock_->Now(),
      [token, turn = std::move(turn), apply = std::move(apply),
       done = std::move(done)](absl::StatusOr<FenceState> raised) mutable {
        if (!raised.ok()) {
          turn.Release();
          std::move(done)(raised.status());
          return;
        }
        CheckRaised(raised->domain, token, *raised);
        FenceDecision decision;
        decision.fence = *std::move(raised);
        decision.advanced = true;
        ApplyHolding(std::move(turn), token, std::move(decision),
                     std::move(apply), std::move(done));
      });
}

void Fencer::ApplyHolding(Turn turn, uint64_t token, FenceDecision decision,
                          AsyncApply apply, DecisionCallback done) {
  FENCEGATE_SYNC_POINT_ARG("Fencer::Execute:BeforeApply", &token);
  std::move(apply)([token, turn = std::move(turn),
                    decision = std::move(decision),
                    done = std::move(done)](absl::Status s) mutable {
    if (s.ok()) {
      FENCEGATE_SYNC_POINT_ARG("Fencer::Execute:AfterApply", &token);
    }
    turn.Release();
    if (s.ok()) {
      std::move(done)(std::move(decision));
    } else {
      std::move(done)(Failed(std::move(s), decision));
    }
  });
}

absl::StatusOr<FenceDecision> Fencer::Fence(const Turn& turn, uint64_t token,
                                            const AdvanceCheck* check) {
  turns_.CheckHeld(turn);
  const std::string& domain = turn.domain();
  if (storage_ != nullptr) {
    if (absl::Status s = storage_->CheckToken(token); !s.ok()) return s;
    if (absl::Status s = LearnFirst(turn, check); !s.ok()) return s;
  }
  absl::StatusOr<FenceDecision> decision = CheckAndRecord(domain, token, check);
  if (!decision.ok() || storage_ == nullptr) return decision;
  absl::Status raised = storage_->Raise(domain, token);
  if (raised.ok()) return decision;
  if (std::optional<StaleTokenInfo> stale = GetStaleToken(raised);
      stale.has_value()) {
    if (stale->highest_token > token) {
      // In the domain's turn still: learn what the storage holds.
      if (absl::StatusOr<FenceState> learnt =
              store_->Raise(domain, stale->highest_token, clock_->Now());
          !learnt.ok()) {
        return Failed(learnt.status(), *decision);
      }
    }
    return raised;  // The stale token alone, without the advance's mark.
  }
  return Failed(std::move(raised), *decision);
}

absl::StatusOr<FenceDecision> Fencer::Fence(absl::string_view domain,
                                            uint64_t token,
                                            const AdvanceCheck* check) {
  Turn turn = turns_.Wait(domain);
  return Fence(turn, token, check);
}

absl::Status Fencer::Learn(const Turn& turn, uint64_t token) {
  turns_.CheckHeld(turn);
  return store_->Raise(turn.domain(), token, clock_->Now()).status();
}

absl::Status Fencer::Learn(absl::string_view domain, uint64_t token) {
  Turn turn = turns_.Wait(domain);
  return Learn(turn, token);
}

void Fencer::LearnFromStorage(absl::string_view domain,
                              absl::AnyInvocable<void(absl::Status) &&> done) {
  turns_.Queue(domain, [this, done = std::move(done)](Turn turn) mutable {
    absl::Status status = absl::OkStatus();
    if (storage_ != nullptr) {
      absl::StatusOr<uint64_t> held = storage_->Read(turn.domain());
      if (!held.ok()) {
        status = held.status();
      } else if (*held > 0) {
        status = Learn(turn, *held);
      }
    }
    turn.Release();
    std::move(done)(std::move(status));
  });
}

absl::StatusOr<uint64_t> Fencer::NextGrantable(const Turn& turn,
                                               uint64_t at_least) {
  turns_.CheckHeld(turn);
  if (storage_ == nullptr) return at_least;
  return storage_->Next(turn.domain(), at_least);
}

absl::StatusOr<FenceDecision> Fencer::Sequence(const Turn& turn,
                                               const AdvanceCheck* check) {
  turns_.CheckHeld(turn);
  const std::string& domain = turn.domain();
  absl::StatusOr<FenceState> current = store_->Get(domain);
  if (!current.ok()) return current.status();
  if (current->highest_token == std::numeric_limits<uint64_t>::max()) {
    return absl::OutOfRangeError(absl::StrCat(
        "domain \"", domain,
        "\": its fence is at 2^64-1, no higher token can be issued"));
  }
  // Asked before any storage moves: a refusal moves nothing anywhere.
  const uint64_t candidate = current->highest_token + 1;
  if (storage_ != nullptr) {
    if (absl::Status s = storage_->CheckToken(candidate); !s.ok()) return s;
  }
  if (absl::Status s = Admit(check, *current, candidate); !s.ok()) return s;
  absl::StatusOr<uint64_t> next = NextGrantable(turn, candidate);
  if (!next.ok()) return next.status();
  if (*next != candidate) {
    // The storage was ahead (another gateway's grants): the advance is the
    // one from the storage's fence, which has moved already.
    FenceState storage_fence = *current;
    storage_fence.highest_token = *next - 1;
    if (absl::Status s = Admit(check, storage_fence, *next); !s.ok()) {
      if (absl::StatusOr<FenceState> learnt =
              store_->Raise(domain, *next, clock_->Now());
          !learnt.ok()) {
        return learnt.status();
      }
      return absl::Status(
          s.code(), absl::StrCat(s.message(), " (yet the storage's fence, at ",
                                 *next - 1, " already, moved to ", *next,
                                 ", and this gateway's with it)"));
    }
  }
  return CheckAndRecord(domain, *next, /*check=*/nullptr);
}

absl::Status Fencer::LearnFirst(const Turn& turn, const AdvanceCheck* check) {
  if (check == nullptr || storage_ == nullptr) return absl::OkStatus();
  absl::StatusOr<FenceState> current = store_->Get(turn.domain());
  if (!current.ok()) return current.status();
  if (current->advanced_at != absl::InfinitePast()) return absl::OkStatus();
  // Never raised here: the storage's fence (another gateway's, or one this
  // store lost) is the one a check's limits are measured from.
  absl::StatusOr<uint64_t> held = storage_->Read(turn.domain());
  if (!held.ok()) return held.status();
  if (*held == 0) return absl::OkStatus();
  return Learn(turn, *held);
}

absl::Status Fencer::Admit(const AdvanceCheck* check, const FenceState& current,
                           uint64_t token) {
  if (check == nullptr) return absl::OkStatus();
  std::optional<absl::Status> admitted =
      check->Check(current, token, /*may_block=*/true);
  if (!admitted.has_value()) {
    return absl::InternalError("advance check did not decide");
  }
  return *std::move(admitted);
}

absl::StatusOr<FenceDecision> Fencer::Sequence(absl::string_view domain,
                                               const AdvanceCheck* check) {
  Turn turn = turns_.Wait(domain);
  return Sequence(turn, check);
}

absl::StatusOr<FenceState> Fencer::Get(absl::string_view domain) {
  return store_->Get(domain);
}

}  // namespace fencegate
