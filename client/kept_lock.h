// Copyright fencegate authors.
//
// KeptLock: the part every token source's held lock shares -- name, token,
// the lost flag and `on_lost`, and a keep-alive thread that renews every
// ttl/3. A renewal that finds the lock gone marks it lost at once; renewals
// that fail (the source unreachable) mark it lost once the ttl since the
// start of the last good one (or the grant) has run out. `on_lost` must not
// call Release() or destroy the lock: it runs on the keep-alive thread,
// which both join. Private to client/.

#ifndef CLIENT_KEPT_LOCK_H_
#define CLIENT_KEPT_LOCK_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "fencegate/client/token_source.h"

namespace fencegate::client::internal {

class KeptLock : public HeldLock {
 public:
  const std::string& name() const final { return name_; }
  uint64_t token() const final { return token_; }
  bool lost() const final { return lost_.load(); }

  // Stops the keep-alive, then Remove(). FAILED_PRECONDITION if the lock
  // was lost before (Remove() is tried all the same). After it, lost() is
  // true.
  absl::Status Release() final;

 protected:
  enum class Renewal { kRenewed, kGone, kFailed };

  // `granted`: when the lock was taken (its ttl runs from then).
  KeptLock(std::string name, uint64_t token, absl::Duration ttl,
           absl::Time granted, std::function<void()> on_lost);
  ~KeptLock() override;

  // The subclass's constructor calls it last: Renew() may run from then on.
  void StartKeepAlive();
  // The subclass's destructor calls it first: releases the lock if still
  // held (errors ignored) and stops the keep-alive, while the subclass's
  // members are still alive.
  void Shutdown();

  // One renewal, on the keep-alive thread.
  virtual Renewal Renew() = 0;
  // Gives the lock up if still ours; the keep-alive has stopped.
  virtual absl::Status Remove() = 0;

 private:
  void KeepAliveLoop();
  void StopKeepAlive();

  const std::string name_;
  const uint64_t token_;
  const absl::Duration ttl_;
  const absl::Time granted_;
  std::function<void()> on_lost_;
  std::atomic<bool> lost_{false};
  bool released_ = false;
  absl::Notification stop_;
  std::thread keepalive_;
};

// INVALID_ARGUMENT unless `name` is a valid lock name (1 to 512 bytes, no
// NUL: it is the fencing domain), the ttl at least 100 ms and the wait not
// negative.
absl::Status CheckLockRequest(const std::string& name,
                              const LockOptions& options);

}  // namespace fencegate::client::internal

#endif  // CLIENT_KEPT_LOCK_H_
