// Copyright fencegate authors.
//
// FenceStore: the durable record of the highest fencing token per domain.
//
// The store is monotone: a domain's highest token only ever rises. Raise()
// makes a rise durable (on stable storage, synced) before it returns, so a
// crash, kill -9 or power loss can never roll a fence back.

#ifndef FENCING_FENCE_STORE_H_
#define FENCING_FENCE_STORE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace fencegate {

// A domain's fence. highest_token == 0 means the domain was never fenced;
// advanced_at is then absl::InfinitePast().
struct FenceState {
  std::string domain;
  uint64_t highest_token = 0;
  absl::Time advanced_at = absl::InfinitePast();
};

// Thread safety: all methods are safe to call concurrently, for the same or
// different domains, without external synchronization.
class FenceStore {
 public:
  FenceStore() = default;
  FenceStore(const FenceStore&) = delete;
  FenceStore& operator=(const FenceStore&) = delete;
  virtual ~FenceStore() = default;

  // Returns the domain's fence; a never-fenced domain yields token 0.
  // Errors: UNAVAILABLE / INTERNAL if the store cannot be read.
  virtual absl::StatusOr<FenceState> Get(absl::string_view domain) = 0;

  // The domain's fence if the store can answer from memory, without I/O or
  // waiting; std::nullopt otherwise (Get() then answers, from a thread that
  // may block). Never-fenced domains may read as std::nullopt. The default
  // answers nothing from memory.
  virtual std::optional<FenceState> GetCached(absl::string_view domain) {
    return std::nullopt;
  }

  // Raises the domain's highest token to `token` if it is higher than the
  // stored one, recording `at` as the time of the advance, and returns the
  // fence afterwards. When the stored token is already >= `token`, nothing
  // is written and the stored fence is returned unchanged: callers compare
  // the result's highest_token with `token`.
  //
  // A returned rise is durable. A failure to make it durable is fatal to
  // the process (the fence state would otherwise be uncertain), so an error
  // return means only that nothing was changed (e.g. UNAVAILABLE while
  // reading).
  virtual absl::StatusOr<FenceState> Raise(absl::string_view domain,
                                           uint64_t token, absl::Time at) = 0;

  // Raise() that completes later: `done` runs exactly once with what Raise()
  // would have returned, after the rise is durable. The default runs Raise()
  // and then `done` on the calling thread.
  using RaiseCallback = absl::AnyInvocable<void(absl::StatusOr<FenceState>) &&>;
  virtual void RaiseAsync(absl::string_view domain, uint64_t token,
                          absl::Time at, RaiseCallback done) {
    std::move(done)(Raise(domain, token, at));
  }

  // True if RaiseAsync() never waits for I/O: it only queues the rise, and
  // `done` runs later on a thread of the store's. That thread then makes
  // every queued rise durable, so `done` must not block or call Raise():
  // it would hold up (or deadlock) every rise queued after it.
  virtual bool RaiseAsyncNeverBlocks() const { return false; }
};

}  // namespace fencegate

#endif  // FENCING_FENCE_STORE_H_
