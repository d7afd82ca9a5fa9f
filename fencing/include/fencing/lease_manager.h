// Copyright fencegate authors.
//
// LeaseManager: the built-in lease service's locks. One holder per name at a
// time; every grant takes a fencing token one above the domain's fence (and
// above the storage's, Fencer::NextGrantable, which raises the storage's
// fence to it first) and raises the fence to it in the same durable write
// (LeaseStore::GrantLease), in the domain's turn (Fencer::RunInTurn, the
// one serializer of the domain's fence), so the previous holder is shut out
// before the new one hears of its token and no write of the old holder can land
// after the grant.
//
// Expiry runs on a monotonic clock (Boost.Asio steady_timer). Expiry times
// are also stored as wall-clock times: on start-up, leases whose time passed
// while the gateway was down are expired, and the others get the remaining
// time on the monotonic clock.

#ifndef FENCING_LEASE_MANAGER_H_
#define FENCING_LEASE_MANAGER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/steady_timer.hpp"
#include "fencing/clock.h"
#include "fencing/fencer.h"
#include "fencing/lease_store.h"
#include "metrics/metrics_context.h"
#include "prometheus/counter.h"

namespace fencegate {

struct AcquireOutcome {
  bool acquired = false;
  // When acquired: the new lease. Otherwise the current holder's owner and
  // token (lease_id empty).
  LeaseRecord lease;
};

struct LeaseManagerOptions {
  // Acquire calls waiting at once, over all locks; beyond it Acquire fails
  // RESOURCE_EXHAUSTED (after dropping waiters whose callers went away).
  // One caller (identity), and one lock, may each have at most half of it
  // waiting: no caller can take every place from the others. Default: 1024.
  size_t max_waiters = 1024;
  // Where the manager exports fencegate_lease_grants_total,
  // fencegate_lease_expiries_total and fencegate_leases_held (read at
  // scrape). Default: metrics off.
  MetricsContext metrics;
};

// Thread safety: safe for concurrent use. Callbacks run on the calling
// thread, the manager's timer thread or the Fencer's Runner, without
// internal locks held.
class LeaseManager {
 public:
  using AcquireCallback =
      absl::AnyInvocable<void(absl::StatusOr<AcquireOutcome>) &&>;

  // Loads stored leases, dropping those that expired meanwhile, and starts
  // the timer thread. `store`, `fencer` and `clock` must outlive it.
  static absl::StatusOr<std::unique_ptr<LeaseManager>> Create(
      LeaseStore* store, Fencer* fencer, Clock* clock,
      LeaseManagerOptions options = {});
  // Shutdown(), waits for the grants in flight (each waits for its
  // domain's turn), then stops the timer thread.
  ~LeaseManager();  // NOLINT(bugprone-exception-escape): joins only.

  // Takes `name` for `owner` with `ttl`, asked by `caller` (the caller's
  // identity; empty when it has none). If held, waits up to `wait` (zero:
  // not at all) and then reports acquired = false. `cancelled`, if set, is
  // asked before a waiter is granted the lock: a waiter whose caller went
  // away is skipped. `done` runs exactly once. INVALID_ARGUMENT for a bad
  // name, or an owner that is not UTF-8 or is longer than kMaxOwnerBytes
  // (common/limits.h; nothing is stored); OUT_OF_RANGE when the domain's fence
  // is at 2^64-1; RESOURCE_EXHAUSTED when max_waiters Acquire calls wait
  // already, or half of it for `name` or for `caller`; UNAVAILABLE after
  // Shutdown(); CANCELLED if `cancelled` says so when the grant's turn
  // comes. Never blocks: a grant is made in the domain's turn on the
  // Fencer's Runner, after the domain's writes asked for earlier, and
  // `done` then runs there; a refusal runs `done` on the calling thread.
  void Acquire(const std::string& name, const std::string& owner,
               const std::string& caller, absl::Duration ttl,
               absl::Duration wait, std::function<bool()> cancelled,
               AcquireCallback done);

  // Renews the lease for its ttl from now. NOT_FOUND if it is lost;
  // INVALID_ARGUMENT for a lease_id longer than kMaxLeaseIdBytes;
  // UNAVAILABLE while shutting down (the lease itself is kept).
  absl::StatusOr<absl::Duration> KeepAlive(const std::string& name,
                                           const std::string& lease_id);

  // Deletes the lease if `lease_id` holds `name`; FAILED_PRECONDITION if
  // not; INVALID_ARGUMENT for a lease_id longer than kMaxLeaseIdBytes. The next
  // waiter, if any, is granted the lock.
  absl::Status Release(const std::string& name, const std::string& lease_id);

  // Fails pending waiters with UNAVAILABLE and refuses further calls.
  void Shutdown();

 private:
  struct Waiter {
    std::string caller;
    std::string owner;
    absl::Duration ttl;
    std::function<bool()> cancelled;
    AcquireCallback done;
    std::unique_ptr<boost::asio::steady_timer> timer;
  };
  struct Lock {
    // Holder; lease_id empty when free or while a grant is being written.
    LeaseRecord lease;
    // A grant is being made durable (outside mu_): the lock is taken.
    bool granting = false;
    std::unique_ptr<boost::asio::steady_timer> expiry;
    std::deque<std::shared_ptr<Waiter>> waiters;
  };

  LeaseManager(LeaseStore* store, Fencer* fencer, Clock* clock,
               LeaseManagerOptions options);
  // Drops waiters whose callers went away, appending their callbacks to
  // `deferred`.
  void DropCancelledWaitersLocked(
      std::vector<absl::AnyInvocable<void() &&>>* deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // OK if `caller` may add a waiter for `name` (held in `lock`): fewer than
  // max_waiters wait in all, and fewer than half of it for the lock and for
  // the caller; RESOURCE_EXHAUSTED naming the limit otherwise.
  absl::Status RoomToWaitLocked(const std::string& name, const Lock& lock,
                                const std::string& caller) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts a waiter out (waiting_ and waiting_by_caller_).
  void ForgetWaiterLocked(const Waiter& waiter)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Makes a grant of `name`, reserved with Lock::granting, in the domain's
  // turn (which may come after a write in flight): asks for the turn and
  // returns; FinishGrant follows there.
  void StartGrant(const std::string& name, const std::string& owner,
                  absl::Duration ttl, std::function<bool()> cancelled,
                  AcquireCallback done);
  // Makes the grant durable holding `turn` (unless `cancelled` says the
  // caller went away), installs it, passes the turn on and runs `done`. On
  // failure the lock passes to the next waiter.
  void FinishGrant(Fencer::Turn turn, const std::string& owner,
                   absl::Duration ttl, const std::function<bool()>& cancelled,
                   AcquireCallback done);
  void ArmExpiryLocked(Lock& lock, const std::string& name,
                       absl::Duration remaining)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnExpiry(const std::string& name, const std::string& lease_id);
  void OnWaitTimeout(const std::string& name, std::shared_ptr<Waiter> waiter);
  // Frees `name` and reserves it for the first live waiter, whose grant is
  // started (StartGrant) once mu_ is released. Callbacks to run after unlocking
  // are appended to `deferred`.
  void FreeAndHandOverLocked(
      const std::string& name,
      std::vector<absl::AnyInvocable<void() &&>>* deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  LeaseStore* const store_;
  Fencer* const fencer_;
  Clock* const clock_;
  const LeaseManagerOptions options_;
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type>
      work_;
  std::thread timer_thread_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Lock> locks_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  // Waiters in every Lock::waiters.
  size_t waiting_ ABSL_GUARDED_BY(mu_) = 0;
  // Grants started (StartGrant) and not yet finished.
  size_t grants_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  // Waiters by caller (only callers with some).
  absl::flat_hash_map<std::string, size_t> waiting_by_caller_
      ABSL_GUARDED_BY(mu_);
  // Metrics; null when off.
  prometheus::Counter* grants_ = nullptr;
  prometheus::Counter* expiries_ = nullptr;
  // Leases held now, kept beside locks_ so that a scrape takes no lock.
  std::atomic<int64_t> held_{0};
  std::shared_ptr<void> held_gauge_;
};

}  // namespace fencegate

#endif  // FENCING_LEASE_MANAGER_H_
