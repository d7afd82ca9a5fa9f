// Copyright fencegate authors.

#include "client/kept_lock.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace fencegate::client::internal {

KeptLock::KeptLock(std::string name, uint64_t token, absl::Duration ttl,
                   absl::Time granted, std::function<void()> on_lost)
    : name_(std::move(name)),
      token_(token),
      ttl_(ttl),
      granted_(granted),
      on_lost_(std::move(on_lost)) {}

KeptLock::~KeptLock() { StopKeepAlive(); }

void KeptLock::StartKeepAlive() {
  keepalive_ = std::thread([this] { KeepAliveLoop(); });
}

void KeptLock::Shutdown() {
  if (!released_) Release().IgnoreError();  // Best effort; it expires too.
  StopKeepAlive();
}

absl::Status KeptLock::Release() {
  StopKeepAlive();
  released_ = true;
  absl::Status removed = Remove();
  if (lost_.exchange(true) && removed.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("lock \"", name_, "\" was lost before its release"));
  }
  return removed;
}

void KeptLock::KeepAliveLoop() {
  absl::Time last_renewed = granted_;
  while (!stop_.WaitForNotificationWithTimeout(ttl_ / 3)) {
    // A renewal extends the lock from when it was sent, not answered.
    const absl::Time sent = absl::Now();
    const Renewal renewal = Renew();
    if (renewal == Renewal::kRenewed) {
      last_renewed = sent;
      continue;
    }
    if (renewal == Renewal::kGone || absl::Now() - last_renewed >= ttl_) {
      if (!lost_.exchange(true) && on_lost_) on_lost_();
      return;
    }
  }
}

void KeptLock::StopKeepAlive() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (keepalive_.joinable()) keepalive_.join();
}

absl::Status CheckLockRequest(const std::string& name,
                              const LockOptions& options) {
  if (name.empty() || name.size() > 512 ||
      name.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(
        "lock name: 1 to 512 bytes, no NUL (it is the fencing domain)");
  }
  if (options.ttl < absl::Milliseconds(100) ||
      options.wait < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "ttl must be at least 100 ms and wait not negative");
  }
  return absl::OkStatus();
}

}  // namespace fencegate::client::internal
