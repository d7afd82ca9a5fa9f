// Copyright fencegate authors.
//
// RunExclusive: run `work` while holding a lock, with its fencing token.
//
//   absl::Status s = RunExclusive(source, "nightly-billing", {}, [&](const
//       LockContext& lock) {
//     request.set_token(lock.token);     // every write fenced
//     request.set_seq(lock.seq.Next());  // and safe to retry
//     return WriteWithRetry(*stub, request, {}).status();
//   });
//
// Acquires the lock (waiting up to options.wait), keeps it alive while
// `work` runs, and releases it afterwards even when `work` fails. `work`
// should check lock.lost() between steps; writes made after a loss are
// refused by the gateway once a new holder has fenced.

#ifndef CLIENT_RUN_EXCLUSIVE_H_
#define CLIENT_RUN_EXCLUSIVE_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "fencegate/client/token_source.h"

namespace fencegate::client {

// The seq numbers of one holding of a lock: 1, 2, 3, ... for the Writes
// made with its token (WriteRequest.seq; write_retry.h). Each Write takes
// a new one; a retry of a Write reuses its own. Thread-safe.
class SeqCounter {
 public:
  uint64_t Next() { return next_.fetch_add(1, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> next_{1};
};

struct LockContext {
  const std::string& name;  // The lock, and the fencing domain.
  uint64_t token;
  const HeldLock& lock;
  // Starts at 1 for every holding (every token).
  SeqCounter& seq;
  bool lost() const { return lock.lost(); }
};

// Returns `work`'s status; or the Acquire error (work not run); or, if work
// succeeded but the lock was lost during it, FAILED_PRECONDITION "lock lost"
// so the caller knows its writes may have been fenced off. A failed release
// after successful work is reported too.
absl::Status RunExclusive(
    TokenSource& source, const std::string& name, const LockOptions& options,
    absl::FunctionRef<absl::Status(const LockContext&)> work);

}  // namespace fencegate::client

#endif  // CLIENT_RUN_EXCLUSIVE_H_
