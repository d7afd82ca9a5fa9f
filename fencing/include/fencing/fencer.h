// Copyright fencegate authors.
//
// Fencer: enforces the fencing contract (docs/fencing.md) around a write.
//
//   1. token <  highest  -> FAILED_PRECONDITION (StaleTokenError); the write
//                           is not applied.
//   2. token == highest  -> accepted; the fence is unchanged.
//   3. token >  highest  -> the new highest is made durable (FenceStore::Raise)
//                           before the write is applied.
//   4. For one domain, check, record and apply run in the domain's turn
//      (domain_turns.h), the one serializer of everything that reads or
//      moves a domain's fence, so once a token T is accepted no lower token
//      is applied after it, even a request that arrived earlier. Different
//      domains run in parallel.
//   5. If apply fails after the fence advanced, the fence stays advanced and
//      the apply error is returned, marked with the new fence
//      (AdvancedBeforeError); retrying with the same token is allowed.
//   6. With an AdvanceCheck (advance_check.h), a token that would raise the
//      fence is first put to it, in the domain's turn; if it refuses,
//      nothing moves and nothing is applied.
//   7. With a StorageFence (storage_fence.h), a fence that moves without a
//      write reaches the storage too, in the domain's turn: Fence()
//      raises the storage's fences after its own and succeeds only once
//      they hold the token; Sequence() and NextGrantable() take their
//      token from the storage, so that gateways sharing it never hand out
//      one token twice. A storage that holds a higher token makes Fence()
//      stale, and this fence is raised to what it holds.
//   8. A refusal moves nothing anywhere: a token a storage cannot hold
//      (StorageFence::CheckToken) and an AdvanceCheck's refusal are
//      decided before any fence moves, here or in a storage; Sequence()
//      puts its candidate (the fence + 1) to the check before it asks the
//      storage for the next token. Fence() with a check, for a domain
//      never raised here, first learns the storage's fence, so that the
//      check measures from it (another gateway's holder is not leapt
//      over).

#ifndef FENCING_FENCER_H_
#define FENCING_FENCER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "fencing/advance_check.h"
#include "fencing/clock.h"
#include "fencing/domain_turns.h"
#include "fencing/fence_store.h"
#include "fencing/storage_fence.h"

namespace fencegate {

struct FenceDecision {
  // The domain's fence after the decision.
  FenceState fence;
  // True if this call raised the domain's highest token.
  bool advanced = false;
};

// Fencer::ExecuteAsync's and Fencer::Submit's options.
struct ExecuteAsyncOptions {
  // As in Fencer::Execute(); it must outlive the call of `done`.
  // Default: none.
  const AdvanceCheck* check = nullptr;
  // Asked when the turn comes, before the check: true ends the call with
  // CANCELLED and moves nothing (the caller went away while it waited).
  // Default: never cancelled.
  std::function<bool()> cancelled;
  // Submit() only: `apply` never blocks (it only queues, or does nothing),
  // so the call may be decided on the calling thread (TryExecuteAsync).
  // Default: it may block, and runs on the Runner.
  bool apply_never_blocks = false;
};

// Thread safety: safe for concurrent use. The methods that take no Turn
// and return a result (Execute, Fence, Sequence, Learn, WaitTurn) wait for
// the domain's turn on the calling thread, and then for the store's sync
// and the apply: call them from threads of their own (watchers, tools,
// tests), never from an RPC thread or the Runner's. ExecuteAsync,
// TryExecuteAsync and RunInTurn never block: they are the gateway's path.
class Fencer {
 public:
  using Turn = DomainTurns::Turn;

  // `store`, `clock` and `storage` (null: no storage keeps fences) are not
  // owned and must outlive the Fencer. `runner` runs work whose turn came
  // (DomainTurns::Runner; the gateway's I/O pool). Default: the thread
  // that frees the turn, for tests and tools.
  Fencer(FenceStore* store, Clock* clock, StorageFence* storage = nullptr,
         DomainTurns::Runner runner = nullptr);
  Fencer(const Fencer&) = delete;
  Fencer& operator=(const Fencer&) = delete;
  ~Fencer();

  // Checks `token` against `domain`'s fence, records an advance durably, then
  // runs `apply`, all in the domain's turn. Returns the decision if apply
  // succeeded; the stale-token error if the token is stale (apply not run);
  // apply's error otherwise (the fence stays as recorded). The caller must
  // have validated domain and token (common/limits.h). `check`, if not
  // null, must admit an advance (rule 6); it must outlive the call. With a
  // check and a storage, a domain never raised here first learns the
  // storage's fence (LearnFirst), so that the check measures from it.
  absl::StatusOr<FenceDecision> Execute(absl::string_view domain,
                                        uint64_t token,
                                        absl::FunctionRef<absl::Status()> apply,
                                        const AdvanceCheck* check = nullptr);

  // Execute() for an apply that completes later, on any thread, asked for
  // without blocking: the check, record and apply run on the Runner when
  // the domain's turn comes. `apply` is called (or not, as in Execute) with
  // a callback that it, or whatever it started, must call exactly once
  // with the apply's outcome; the domain's turn is held until then, so
  // rule 4 holds across threads. `done` runs once with what Execute()
  // would have returned, after the turn is passed on: on the Runner if
  // apply did not run, otherwise on the thread that called back.
  using Applied = absl::AnyInvocable<void(absl::Status) &&>;
  using AsyncApply = absl::AnyInvocable<void(Applied) &&>;
  using DecisionCallback =
      absl::AnyInvocable<void(absl::StatusOr<FenceDecision>) &&>;
  void ExecuteAsync(absl::string_view domain, uint64_t token, AsyncApply apply,
                    DecisionCallback done, ExecuteAsyncOptions options = {});

  // ExecuteAsync() decided on the calling thread, if that needs nothing
  // that blocks: nobody holds or waits for the domain's turn, the store
  // answers from memory (FenceStore::GetCached), and either the token does
  // not advance the fence or the store queues advances
  // (FenceStore::RaiseAsyncNeverBlocks), and `check` (if any) decides an
  // advance without blocking. (A domain never raised here is not in
  // memory: its first Write takes the queued path, which learns the
  // storage's fence first.) Then returns true, having refused a stale
  // token, started `apply`, or queued the advance, and `done` follows; an
  // advance keeps the domain's turn while its synced write is pending, and
  // `apply` then runs on the store's thread once the advance is durable.
  // Otherwise returns false having called neither: use ExecuteAsync().
  // Never blocks itself; `apply` must not block either, for the caller's
  // thread and the store's to stay unblocked. Doors call Submit().
  bool TryExecuteAsync(absl::string_view domain, uint64_t token,
                       AsyncApply& apply, DecisionCallback& done,
                       const AdvanceCheck* check = nullptr);

  // The one way a door (the gRPC service, the PostgreSQL port) puts a
  // write through the fence: TryExecuteAsync() if options.apply_never_blocks
  // and it can decide here, else ExecuteAsync(). Never blocks. `done` runs
  // exactly once, as ExecuteAsync() says; options.cancelled is asked only
  // on the queued path (a call decided here was just made).
  void Submit(absl::string_view domain, uint64_t token, AsyncApply apply,
              DecisionCallback done, ExecuteAsyncOptions options = {});

  // Runs `work` on the Runner in `domain`'s turn, after every turn asked
  // for earlier; the turn passes on when `work` releases or destroys it.
  // Never blocks. For the steps below that take a Turn, which abort the
  // process if it is released or not this Fencer's (DomainTurns::CheckHeld).
  void RunInTurn(absl::string_view domain, DomainTurns::Work work);

  // Blocks until `domain`'s turn comes (see the thread-safety note).
  Turn WaitTurn(absl::string_view domain);

  // Execute() whose apply raises the storage's fences (rule 7), in `turn`:
  // raises the fence of turn.domain() to `token` (or accepts it if
  // equal), or fails with the stale-token error, which holds the
  // storage's token if a storage held a higher one (this fence is then
  // raised to it). A storage that cannot be reached fails it with
  // UNAVAILABLE naming it; this fence may have moved (marked as rule 5
  // says).
  absl::StatusOr<FenceDecision> Fence(const Turn& turn, uint64_t token,
                                      const AdvanceCheck* check = nullptr);
  // The same, waiting for the domain's turn.
  absl::StatusOr<FenceDecision> Fence(absl::string_view domain, uint64_t token,
                                      const AdvanceCheck* check = nullptr);

  // Fence() with a new token, in `turn`: the domain's highest token + 1, or
  // the storage's next (NextGrantable): the new token is unique to this
  // call. OUT_OF_RANGE at 2^64-1.
  absl::StatusOr<FenceDecision> Sequence(const Turn& turn,
                                         const AdvanceCheck* check = nullptr);
  // The same, waiting for the domain's turn.
  absl::StatusOr<FenceDecision> Sequence(absl::string_view domain,
                                         const AdvanceCheck* check = nullptr);

  // The token a new holder of turn.domain() may be given, at least
  // `at_least`: `at_least` itself without a storage; otherwise
  // StorageFence::Next(), which raises the storage's fences to it. Record
  // the token (the lease store's grant) before passing the turn on; the
  // storage may hold it even if that fails (a gap in the tokens, never a
  // token given twice).
  absl::StatusOr<uint64_t> NextGrantable(const Turn& turn, uint64_t at_least);

  // Raises this fence (only) of turn.domain() to `token`, a token some
  // storage holds (its stale-token error said so); never lowers it and
  // asks no AdvanceCheck: the storage admitted it already. Blocks for the
  // fence store's sync.
  absl::Status Learn(const Turn& turn, uint64_t token);
  // The same, waiting for the domain's turn.
  absl::Status Learn(absl::string_view domain, uint64_t token);

  // In `domain`'s turn, on the Runner: reads the storage's fences of
  // `domain` (StorageFence::Read, the gateway's own reading, never a
  // token a client could have put in an error) and raises this fence to
  // the highest, as Learn(); then calls `done` with the outcome (OK
  // without a storage). Never blocks the caller, and takes no Runner
  // thread while it waits for the turn. The one way a door learns a higher
  // token after the storage refused one as stale: never the token the
  // error carried, which a client's SQL could have raised itself.
  void LearnFromStorage(absl::string_view domain,
                        absl::AnyInvocable<void(absl::Status) &&> done);

  // The domain's current fence.
  absl::StatusOr<FenceState> Get(absl::string_view domain);

  // The fence a failed call advanced to before its apply failed (rule 5),
  // read from the error's payload (a fencegate.v1.FenceState, which the
  // gateway passes on as an error detail); nullopt if it did not advance.
  static std::optional<uint64_t> AdvancedBeforeError(const absl::Status& error);
  // Removes that mark (e.g. from a stale-token error the storage raised,
  // whose one detail clients expect to be the StaleToken).
  static void ForgetAdvance(absl::Status& error);

 private:
  // Rules 1-3 in the domain's turn: the stale-token error, or the decision
  // with any advance already durable.
  absl::StatusOr<FenceDecision> CheckAndRecord(absl::string_view domain,
                                               uint64_t token,
                                               const AdvanceCheck* check);
  // With a check, for a domain never raised here: raises this fence to the
  // storage's (Learn), so that the check's limits (max_advance) are
  // measured from the fence the storage keeps, not from nothing.
  absl::Status LearnFirst(const Turn& turn, const AdvanceCheck* check);
  // `check`'s verdict on raising `current` to `token`; OK without a check.
  static absl::Status Admit(const AdvanceCheck* check,
                            const FenceState& current, uint64_t token);
  // Queues the advance of the turn's domain to `token` to the store,
  // holding `turn`; once it is durable, ApplyHolding on the store's thread.
  void RaiseThenApply(Turn turn, uint64_t token, AsyncApply apply,
                      DecisionCallback done);
  // Runs `apply` holding `turn` until it calls back, then passes the turn
  // on and reports `decision` (or apply's error) to `done`.
  static void ApplyHolding(Turn turn, uint64_t token, FenceDecision decision,
                           AsyncApply apply, DecisionCallback done);

  FenceStore* const store_;
  Clock* const clock_;
  StorageFence* const storage_;
  DomainTurns turns_;
};

}  // namespace fencegate

#endif  // FENCING_FENCER_H_
