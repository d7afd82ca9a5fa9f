// Copyright fencegate authors.

#include "fencegate/client/run_exclusive.h"

#include "absl/strings/str_cat.h"

namespace fencegate::client {

absl::Status RunExclusive(
    TokenSource& source, const std::string& name, const LockOptions& options,
    absl::FunctionRef<absl::Status(const LockContext&)> work) {
  absl::StatusOr<std::unique_ptr<HeldLock>> lock =
      source.Acquire(name, options, nullptr);
  if (!lock.ok()) return lock.status();
  SeqCounter seq;
  absl::Status result =
      work(LockContext{(*lock)->name(), (*lock)->token(), **lock, seq});
  const bool lost = (*lock)->lost();
  absl::Status released = (*lock)->Release();
  if (!result.ok()) return result;
  if (lost) {
    return absl::FailedPreconditionError(absl::StrCat(
        "lock \"", name, "\" (token ", (*lock)->token(),
        ") was lost while the work ran; its writes may have been refused"));
  }
  return released;
}

}  // namespace fencegate::client
