// Copyright fencegate authors.

#include "storage_adapters/postgres/statement_watchdog.h"

#include <pthread.h>

#include <algorithm>
#include <utility>

namespace fencegate::postgres {
namespace {

// How often the thread looks at the watched connections while there are
// any: the precision of a cancel.
constexpr absl::Duration kTick = absl::Milliseconds(100);

}  // namespace

struct StatementWatchdog::Watch::State {
  absl::Mutex mu;
  PGcancel* cancel ABSL_GUARDED_BY(mu) = nullptr;  // Freed by Disarm().
  // The current Write's deadline (0: none), and the last one a cancel was
  // sent for: a later deadline is watched again.
  std::atomic<int64_t> deadline_ns{0};
  std::atomic<int64_t> cancelled_for_ns{-1};
  std::atomic<bool> cancelled{false};
};

StatementWatchdog::StatementWatchdog(absl::Duration limit)
    : limit_(limit), thread_([this] { Run(); }) {}

StatementWatchdog::~StatementWatchdog() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

StatementWatchdog::Watch::Watch(StatementWatchdog* dog, PGconn* conn)
    : dog_(dog), state_(std::make_shared<State>()) {
  {
    absl::MutexLock lock(&state_->mu);
    state_->cancel = PQgetCancel(conn);
  }
  {
    // The thread looks every kTick whether or not anything is watched, so a
    // new Watch never wakes it (at a light load every batch's Watch is a
    // first one, and a wake-up per batch cost a context switch per Write).
    absl::MutexLock lock(&dog_->mu_);
    dog_->watched_.push_back(state_);
  }
  Progress();
}

StatementWatchdog::Watch::~Watch() { Disarm(); }

bool StatementWatchdog::Watch::Disarm() {
  {
    absl::MutexLock lock(&dog_->mu_);
    auto& w = dog_->watched_;
    w.erase(std::remove(w.begin(), w.end(), state_), w.end());
  }
  // Waits for a cancel being sent right now.
  absl::MutexLock lock(&state_->mu);
  if (state_->cancel != nullptr) PQfreeCancel(state_->cancel);
  state_->cancel = nullptr;
  return state_->cancelled.load(std::memory_order_acquire);
}

void StatementWatchdog::Watch::Progress(absl::Time client_deadline) {
  if (dog_->cancel_all_.load(std::memory_order_acquire)) {
    // Shutting down: whatever runs next on this connection is cancelled.
    dog_->Cancel(state_, 0);
    return;
  }
  const absl::Time deadline =
      std::min(client_deadline, dog_->limit_ == absl::InfiniteDuration()
                                    ? absl::InfiniteFuture()
                                    : absl::Now() + dog_->limit_);
  state_->deadline_ns.store(
      deadline == absl::InfiniteFuture() ? 0 : absl::ToUnixNanos(deadline),
      std::memory_order_relaxed);
}

bool StatementWatchdog::Watch::cancelled() const {
  return state_->cancelled.load(std::memory_order_acquire);
}

void StatementWatchdog::CancelAll() {
  cancel_all_.store(true, std::memory_order_release);
  std::vector<std::shared_ptr<Watch::State>> all;
  {
    absl::MutexLock lock(&mu_);
    all = watched_;
  }
  for (const auto& state : all) Cancel(state, 0);
}

void StatementWatchdog::Cancel(const std::shared_ptr<Watch::State>& state,
                               int64_t deadline_ns) {
  absl::MutexLock lock(&state->mu);
  if (state->cancel == nullptr) return;  // Disarmed: the sender is done.
  state->cancelled_for_ns.store(deadline_ns, std::memory_order_relaxed);
  state->cancelled.store(true, std::memory_order_release);
  char error[256];
  // A failed cancel (server unreachable) leaves the statement to the
  // server's own timeout and the connection's keepalives.
  (void)PQcancel(state->cancel, error, sizeof(error));
}

void StatementWatchdog::Run() {
  pthread_setname_np(pthread_self(), "pg-watchdog");
  mu_.Lock();
  while (!stopping_) {
    absl::Time next = absl::InfiniteFuture();
    const absl::Time now = absl::Now();
    std::vector<std::pair<std::shared_ptr<Watch::State>, int64_t>> due;
    for (const auto& state : watched_) {
      const int64_t ns = state->deadline_ns.load(std::memory_order_relaxed);
      if (ns == 0 ||
          ns == state->cancelled_for_ns.load(std::memory_order_relaxed)) {
        continue;  // No deadline, or this one was acted on already.
      }
      const absl::Time deadline = absl::FromUnixNanos(ns);
      if (deadline <= now) {
        due.emplace_back(state, ns);
      } else {
        next = std::min(next, deadline);
      }
    }
    if (!due.empty()) {
      mu_.Unlock();
      for (const auto& [state, ns] : due) Cancel(state, ns);
      mu_.Lock();
      continue;
    }
    // Wake for the earliest deadline, and at least every kTick: a new Watch
    // or a Write that completes sets a deadline without waking this thread
    // (that would cost a wake-up per Write), and is found on the next look.
    next = std::min(next, now + kTick);
    auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_;
    };
    mu_.AwaitWithDeadline(absl::Condition(&stopping), next);
  }
  mu_.Unlock();
}

}  // namespace fencegate::postgres
