// Copyright fencegate authors.
//
// LeaseKeeper (internal to client/etcd): keeps one etcd lease alive from a
// background thread, sending a LeaseKeepAlive every TTL/3 (TTL as granted,
// then as last renewed by etcd). Each round opens a short LeaseKeepAlive
// stream with a deadline, so a hung etcd cannot stall the thread past the
// lease's end.
//
// The lease counts as lost when etcd answers with TTL <= 0 (expired or
// revoked), or when no keep-alive has succeeded by the lease's expiry as
// seen from here: the send time of the last acknowledged request plus the
// TTL etcd returned (never later than etcd's own expiry). Failed rounds
// before that are retried.
//
// Thread safety: all methods may be called from any thread, except that
// Stop() (and the destructor) must not be called from inside `on_lost`.

#ifndef CLIENT_ETCD_LEASE_KEEPER_H_
#define CLIENT_ETCD_LEASE_KEEPER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/etcd/etcd_connection.h"

namespace fencegate::client::etcd_internal {

class LeaseKeeper {
 public:
  // Starts the thread for `lease_id`, granted with `ttl` by a LeaseGrant
  // sent at `granted_at`.
  LeaseKeeper(std::shared_ptr<EtcdConnection> connection, int64_t lease_id,
              absl::Duration ttl, absl::Time granted_at);
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;
  ~LeaseKeeper();  // Stop().

  // From now on a loss runs `on_lost` (may be empty) once, on the keeper
  // thread. Returns false, without keeping `on_lost`, if the lease is
  // already lost.
  bool Arm(std::function<void()> on_lost);

  // True once the lease is lost (see above).
  bool lost() const { return lost_.load(std::memory_order_acquire); }

  // Stops keeping the lease alive and joins the thread; `on_lost` does not
  // run after Stop() returns. Idempotent.
  void Stop();

 private:
  void Run();
  // One keep-alive round; returns the TTL etcd granted (<= 0: lease gone).
  absl::StatusOr<int64_t> KeepAliveOnce(absl::Time deadline);
  // Waits until `until` or Stop(); true if stopped.
  bool WaitStopped(absl::Time until);
  void MarkLost();

  const std::shared_ptr<EtcdConnection> connection_;
  const int64_t lease_id_;
  // Lease length and local expiry estimate; only the keeper thread uses
  // them once it runs.
  absl::Duration ttl_;
  absl::Time expiry_;

  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool armed_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> on_lost_ ABSL_GUARDED_BY(mu_);
  // The in-flight keep-alive call, cancelled by Stop().
  grpc::ClientContext* active_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::atomic<bool> lost_{false};
  std::thread thread_;
};

}  // namespace fencegate::client::etcd_internal

#endif  // CLIENT_ETCD_LEASE_KEEPER_H_
