// Copyright fencegate authors.

#include "fencing/lease_manager.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "fencegate/common/limits.h"
#include "fencegate/common/thread_name.h"

namespace fencegate {
namespace {

constexpr absl::Duration kMinTtl = absl::Milliseconds(100);
constexpr absl::Duration kMaxTtl = absl::Hours(1);
constexpr absl::Duration kMaxWait = absl::Hours(1);

std::string NewLeaseId() {
  std::random_device rd;
  std::uniform_int_distribution<uint64_t> dist;
  return absl::StrFormat("%016x%016x", dist(rd), dist(rd));
}

std::chrono::steady_clock::duration ToSteady(absl::Duration d) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      absl::ToChronoNanoseconds(d));
}

}  // namespace

LeaseManager::LeaseManager(LeaseStore* store, Fencer* fencer, Clock* clock,
                           LeaseManagerOptions options)
    : store_(store),
      fencer_(fencer),
      clock_(clock),
      options_(options),
      work_(boost::asio::make_work_guard(io_)) {
  const MetricsContext& metrics = options_.metrics;
  if (!metrics.enabled()) return;
  grants_ = &prometheus::BuildCounter()
                 .Name("fencegate_lease_grants_total")
                 .Help("Leases granted by the lease service")
                 .Register(*metrics.registry)
                 .Add({});
  expiries_ = &prometheus::BuildCounter()
                   .Name("fencegate_lease_expiries_total")
                   .Help("Leases that expired without a renewal")
                   .Register(*metrics.registry)
                   .Add({});
  held_gauge_ = metrics.scrape_gauges->Add(
      "fencegate_leases_held", "Leases held now", {},
      [this] { return static_cast<double>(held_.load()); });
}

absl::StatusOr<std::unique_ptr<LeaseManager>> LeaseManager::Create(
    LeaseStore* store, Fencer* fencer, Clock* clock,
    LeaseManagerOptions options) {
  std::unique_ptr<LeaseManager> manager(
      new LeaseManager(store, fencer, clock, options));
  absl::StatusOr<std::vector<LeaseRecord>> leases = store->LoadLeases();
  if (!leases.ok()) return leases.status();
  const absl::Time now = clock->Now();
  {
    absl::MutexLock lock(&manager->mu_);
    for (LeaseRecord& lease : *leases) {
      // Clamped to the ttl, in case the wall clock was set back meanwhile.
      const absl::Duration remaining =
          std::min(lease.expires_at - now, lease.ttl);
      if (remaining <= absl::ZeroDuration()) {
        // Expired while the gateway was down.
        if (absl::Status s = store->RemoveLease(lease.name); !s.ok()) return s;
        continue;
      }
      std::string name = lease.name;
      Lock& l = manager->locks_[name];
      l.lease = std::move(lease);
      ++manager->held_;
      manager->ArmExpiryLocked(l, name, remaining);
    }
  }
  manager->timer_thread_ = std::thread([m = manager.get()] {
    NameThisThread("fg-lease-timer");
    m->io_.run();
  });
  return manager;
}

// Joining a thread throws only for a thread that cannot be joined, which
// these never are.
LeaseManager::~LeaseManager() {  // NOLINT(bugprone-exception-escape)
  Shutdown();
  {
    // A grant waiting for its domain's turn still refers to this manager.
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](size_t* in_flight) { return *in_flight == 0; },
        &grants_in_flight_));
  }
  work_.reset();
  io_.stop();
  if (timer_thread_.joinable()) timer_thread_.join();
}

void LeaseManager::Acquire(const std::string& name, const std::string& owner,
                           const std::string& caller, absl::Duration ttl,
                           absl::Duration wait, std::function<bool()> cancelled,
                           AcquireCallback done) {
  if (absl::Status s = ValidateDomain(name, "name"); !s.ok()) {
    std::move(done)(s);
    return;
  }
  if (absl::Status s = ValidateText(owner, "owner", kMaxOwnerBytes); !s.ok()) {
    std::move(done)(s);
    return;
  }
  if (ttl < kMinTtl || ttl > kMaxTtl) {
    std::move(done)(
        absl::InvalidArgumentError("ttl: must be from 100 ms to 1 hour"));
    return;
  }
  if (wait < absl::ZeroDuration() || wait > kMaxWait) {
    std::move(done)(
        absl::InvalidArgumentError("wait: must be from 0 to 1 hour"));
    return;
  }
  absl::StatusOr<AcquireOutcome> result;
  bool grant_now = false;
  bool queued = false;
  std::vector<absl::AnyInvocable<void() &&>> deferred;
  {
    absl::MutexLock lock(&mu_);
    auto held = locks_.find(name);
    const bool would_wait =
        held != locks_.end() &&
        (!held->second.lease.lease_id.empty() || held->second.granting) &&
        wait > absl::ZeroDuration();
    if (would_wait && waiting_ >= options_.max_waiters) {
      DropCancelledWaitersLocked(&deferred);
    }
    if (shut_down_) {
      result = absl::UnavailableError("lease service is shutting down");
    } else {
      Lock& l = locks_[name];
      if (l.lease.lease_id.empty() && !l.granting) {
        // Reserve it; the durable write happens without mu_.
        l.granting = true;
        l.lease.owner = owner;
        grant_now = true;
      } else if (wait == absl::ZeroDuration()) {
        result = AcquireOutcome{false, l.lease};
        result->lease.lease_id.clear();
      } else if (absl::Status full = RoomToWaitLocked(name, l, caller);
                 !full.ok()) {
        result = std::move(full);
      } else {
        auto waiter = std::make_shared<Waiter>();
        waiter->caller = caller;
        ++waiting_by_caller_[caller];
        waiter->owner = owner;
        waiter->ttl = ttl;
        waiter->cancelled = std::move(cancelled);
        waiter->done = std::move(done);
        waiter->timer = std::make_unique<boost::asio::steady_timer>(io_);
        waiter->timer->expires_after(ToSteady(wait));
        waiter->timer->async_wait(
            [this, name, waiter](const boost::system::error_code& ec) {
              if (!ec) OnWaitTimeout(name, waiter);
            });
        l.waiters.push_back(std::move(waiter));
        ++waiting_;
        queued = true;
      }
    }
  }
  for (auto& fn : deferred) std::move(fn)();
  if (queued) return;  // `done` runs when granted or timed out.
  // `done` and `cancelled` were moved into a waiter only when queued
  // (returned above).
  if (grant_now) {
    StartGrant(name, owner, ttl,
               std::move(cancelled),  // NOLINT(bugprone-use-after-move)
               std::move(done));      // NOLINT(bugprone-use-after-move)
  } else {
    // Shutting down, or held.
    std::move(done)(std::move(result));  // NOLINT(bugprone-use-after-move)
  }
}

void LeaseManager::StartGrant(const std::string& name, const std::string& owner,
                              absl::Duration ttl,
                              std::function<bool()> cancelled,
                              AcquireCallback done) {
  {
    absl::MutexLock lock(&mu_);
    ++grants_in_flight_;
  }
  fencer_->RunInTurn(name, [this, owner, ttl, cancelled = std::move(cancelled),
                            done = std::move(done)](Fencer::Turn turn) mutable {
    FinishGrant(std::move(turn), owner, ttl, cancelled, std::move(done));
  });
}

void LeaseManager::FinishGrant(Fencer::Turn turn, const std::string& owner,
                               absl::Duration ttl,
                               const std::function<bool()>& cancelled,
                               AcquireCallback done) {
  const std::string name = turn.domain();
  LeaseRecord lease;
  absl::Status s = [&]() -> absl::Status {
    if (cancelled && cancelled()) {
      // The caller went away while the grant waited for its turn.
      return absl::CancelledError("cancelled before the lock was taken");
    }
    absl::StatusOr<FenceState> fence = fencer_->Get(name);
    if (!fence.ok()) return fence.status();
    if (fence->highest_token == std::numeric_limits<uint64_t>::max()) {
      return absl::OutOfRangeError(absl::StrCat(
          "lock \"", name,
          "\": its fence is at 2^64-1, no higher token can be granted"));
    }
    // Above every fence the storage holds too (another gateway's grants).
    absl::StatusOr<uint64_t> token =
        fencer_->NextGrantable(turn, fence->highest_token + 1);
    if (!token.ok()) return token.status();
    const absl::Time now = clock_->Now();
    lease = LeaseRecord{name, NewLeaseId(), owner, *token, ttl, now + ttl};
    return store_->GrantLease(lease, now);
  }();
  std::vector<absl::AnyInvocable<void() &&>> deferred;
  {
    absl::MutexLock lock(&mu_);
    Lock& l = locks_[name];
    l.granting = false;
    if (s.ok()) {
      l.lease = lease;
      ArmExpiryLocked(l, name, ttl);
      ++held_;
      if (grants_ != nullptr) grants_->Increment();
    } else {
      FreeAndHandOverLocked(name, &deferred);
    }
  }
  turn.Release();  // Installed: the domain's next work may go on.
  if (s.ok()) {
    std::move(done)(AcquireOutcome{true, std::move(lease)});
  } else {
    std::move(done)(s);
  }
  for (auto& fn : deferred) std::move(fn)();
  absl::MutexLock lock(&mu_);
  --grants_in_flight_;
}

void LeaseManager::ArmExpiryLocked(Lock& lock, const std::string& name,
                                   absl::Duration remaining) {
  if (lock.expiry != nullptr) lock.expiry->cancel();
  lock.expiry = std::make_unique<boost::asio::steady_timer>(io_);
  lock.expiry->expires_after(ToSteady(remaining));
  lock.expiry->async_wait([this, name, lease_id = lock.lease.lease_id](
                              const boost::system::error_code& ec) {
    if (!ec) OnExpiry(name, lease_id);
  });
}

void LeaseManager::OnExpiry(const std::string& name,
                            const std::string& lease_id) {
  std::vector<absl::AnyInvocable<void() &&>> deferred;
  {
    absl::MutexLock lock(&mu_);
    auto it = locks_.find(name);
    if (it == locks_.end() || it->second.lease.lease_id != lease_id) return;
    // A renewal may have re-armed the timer just after this one fired.
    if (it->second.expiry != nullptr &&
        it->second.expiry->expiry() > std::chrono::steady_clock::now()) {
      return;
    }
    store_->RemoveLease(name).IgnoreError();  // Reloaded as expired anyway.
    if (expiries_ != nullptr) expiries_->Increment();
    FreeAndHandOverLocked(name, &deferred);
  }
  for (auto& fn : deferred) std::move(fn)();
}

absl::Status LeaseManager::RoomToWaitLocked(const std::string& name,
                                            const Lock& lock,
                                            const std::string& caller) const {
  const size_t share = std::max<size_t>(1, options_.max_waiters / 2);
  const char* limit = nullptr;
  size_t waiting = 0;
  if (waiting_ >= options_.max_waiters) {
    limit = "max_waiting_acquires";
    waiting = waiting_;
  } else if (lock.waiters.size() >= share) {
    limit = "half of max_waiting_acquires, for one lock";
    waiting = lock.waiters.size();
  } else if (auto it = waiting_by_caller_.find(caller);
             it != waiting_by_caller_.end() && it->second >= share) {
    limit = "half of max_waiting_acquires, for one caller";
    waiting = it->second;
  }
  if (limit == nullptr) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("lock \"", name, "\" is held and ", waiting,
                   " Acquire calls wait already (", limit,
                   "); retry later or with wait_ms=0"));
}

void LeaseManager::ForgetWaiterLocked(const Waiter& waiter) {
  --waiting_;
  auto it = waiting_by_caller_.find(waiter.caller);
  if (it != waiting_by_caller_.end() && --it->second == 0) {
    waiting_by_caller_.erase(it);
  }
}

void LeaseManager::OnWaitTimeout(const std::string& name,
                                 std::shared_ptr<Waiter> waiter) {
  absl::StatusOr<AcquireOutcome> result;
  {
    absl::MutexLock lock(&mu_);
    auto it = locks_.find(name);
    if (it == locks_.end()) return;
    auto& waiters = it->second.waiters;
    auto pos = std::find(waiters.begin(), waiters.end(), waiter);
    if (pos == waiters.end()) return;  // Already granted or failed.
    waiters.erase(pos);
    ForgetWaiterLocked(*waiter);
    result = AcquireOutcome{false, it->second.lease};
    result->lease.lease_id.clear();
  }
  std::move(waiter->done)(std::move(result));
}

void LeaseManager::FreeAndHandOverLocked(
    const std::string& name,
    std::vector<absl::AnyInvocable<void() &&>>* deferred) {
  auto it = locks_.find(name);
  Lock& l = it->second;
  if (!l.lease.lease_id.empty()) --held_;
  l.lease = LeaseRecord();
  if (l.expiry != nullptr) l.expiry->cancel();
  l.expiry.reset();
  while (!l.waiters.empty()) {
    std::shared_ptr<Waiter> waiter = std::move(l.waiters.front());
    l.waiters.pop_front();
    ForgetWaiterLocked(*waiter);
    waiter->timer->cancel();
    if (waiter->cancelled && waiter->cancelled()) {
      deferred->push_back([waiter]() mutable {
        std::move(waiter->done)(
            absl::CancelledError("cancelled while waiting for the lock"));
      });
      continue;
    }
    l.granting = true;
    l.lease.owner = waiter->owner;
    deferred->push_back([this, name, waiter]() mutable {
      StartGrant(name, waiter->owner, waiter->ttl, waiter->cancelled,
                 std::move(waiter->done));
    });
    return;
  }
  locks_.erase(it);  // Free and nobody waiting.
}

void LeaseManager::DropCancelledWaitersLocked(
    std::vector<absl::AnyInvocable<void() &&>>* deferred) {
  for (auto& [name, l] : locks_) {
    for (auto it = l.waiters.begin(); it != l.waiters.end();) {
      std::shared_ptr<Waiter> waiter = *it;
      if (!waiter->cancelled || !waiter->cancelled()) {
        ++it;
        continue;
      }
      it = l.waiters.erase(it);
      ForgetWaiterLocked(*waiter);
      waiter->timer->cancel();
      deferred->push_back([waiter]() mutable {
        std::move(waiter->done)(
            absl::CancelledError("cancelled while waiting for the lock"));
      });
    }
  }
}

absl::StatusOr<absl::Duration> LeaseManager::KeepAlive(
    const std::string& name, const std::string& lease_id) {
  if (absl::Status s = ValidateText(lease_id, "lease_id", kMaxLeaseIdBytes);
      !s.ok()) {
    return s;
  }
  absl::MutexLock lock(&mu_);
  if (shut_down_) {
    // The lease is kept (and reloaded after a restart): not lost.
    return absl::UnavailableError("lease service is shutting down");
  }
  auto it = locks_.find(name);
  if (it == locks_.end() || lease_id.empty() ||
      it->second.lease.lease_id != lease_id) {
    return absl::NotFoundError(absl::StrCat(
        "lease of lock \"", name,
        "\" is lost (expired, released or taken over): stop writing"));
  }
  Lock& l = it->second;
  l.lease.expires_at = clock_->Now() + l.lease.ttl;
  if (absl::Status s = store_->RenewLease(l.lease); !s.ok()) return s;
  ArmExpiryLocked(l, name, l.lease.ttl);
  return l.lease.ttl;
}

absl::Status LeaseManager::Release(const std::string& name,
                                   const std::string& lease_id) {
  if (absl::Status s = ValidateText(lease_id, "lease_id", kMaxLeaseIdBytes);
      !s.ok()) {
    return s;
  }
  std::vector<absl::AnyInvocable<void() &&>> deferred;
  {
    absl::MutexLock lock(&mu_);
    auto it = locks_.find(name);
    if (it == locks_.end() || lease_id.empty() ||
        it->second.lease.lease_id != lease_id) {
      return absl::FailedPreconditionError(
          absl::StrCat("lock \"", name,
                       "\" is not held by this lease; only its holder "
                       "can release it"));
    }
    if (absl::Status s = store_->RemoveLease(name); !s.ok()) return s;
    FreeAndHandOverLocked(name, &deferred);
  }
  for (auto& fn : deferred) std::move(fn)();
  return absl::OkStatus();
}

void LeaseManager::Shutdown() {
  std::vector<std::shared_ptr<Waiter>> waiters;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
    for (auto& [name, l] : locks_) {
      if (l.expiry != nullptr) l.expiry->cancel();
      for (auto& w : l.waiters) {
        w->timer->cancel();
        ForgetWaiterLocked(*w);
        waiters.push_back(std::move(w));
      }
      l.waiters.clear();
    }
  }
  for (auto& w : waiters) {
    std::move(w->done)(
        absl::UnavailableError("lease service is shutting down"));
  }
}

}  // namespace fencegate
