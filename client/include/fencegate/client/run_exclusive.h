// Copyright fencegate authors.
//
// RunExclusive: run `work` while holding a lock, with its fencing token.
//
//   absl::Status s = RunExclusive(source, "nightly-billing", {}, [&](const
//       LockContext& lock) {
//     return gateway.Write(lock.name, lock.token, ...);  // every write fenced
//   });
//
// Acquires the lock (waiting up to options.wait), keeps it alive while
// `work` runs, and releases it afterwards even when `work` fails. `work`
// should check lock.lost() between steps; writes made after a loss are
// refused by the gateway once a new holder has fenced.

#ifndef CLIENT_RUN_EXCLUSIVE_H_
#define CLIENT_RUN_EXCLUSIVE_H_

#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "fencegate/client/token_source.h"

namespace fencegate::client {

struct LockContext {
  const std::string& name;  // The lock, and the fencing domain.
  uint64_t token;
  const HeldLock& lock;
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
