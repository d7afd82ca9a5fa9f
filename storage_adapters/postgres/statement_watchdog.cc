// Copyright fencegate authors.

#include "storage_adapters/postgres/statement_watchdog.h"

#include <pthread.h>

#include <algorithm>

namespace fencegate::postgres {

struct StatementWatchdog::Watch::State {
  absl::Mutex mu;
  PGcancel* cancel ABSL_GUARDED_BY(mu) = nullptr;  // Freed by ~Watch.
  std::atomic<int64_t> deadline_ns{0};
  std::atomic<bool> cancelled{false};
};

StatementWatchdog::StatementWatchdog(absl::Duration limit) : limit_(limit) {
  if (limit_ != absl::InfiniteDuration()) thread_ = std::thread([this] { Run(); });
}

StatementWatchdog::~StatementWatchdog() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

StatementWatchdog::Watch::Watch(StatementWatchdog* dog, PGconn* conn)
    : dog_(dog), state_(std::make_shared<State>()) {
  {
    absl::MutexLock lock(&state_->mu);
    state_->cancel = PQgetCancel(conn);
  }
  Progress();
  bool cancel_now = false;
  {
    absl::MutexLock lock(&dog_->mu_);
    dog_->watched_.push_back(state_);
    cancel_now = dog_->cancel_all_;
  }
  if (cancel_now) dog_->Cancel(state_);
}

StatementWatchdog::Watch::~Watch() {
  {
    absl::MutexLock lock(&dog_->mu_);
    auto& w = dog_->watched_;
    w.erase(std::remove(w.begin(), w.end(), state_), w.end());
  }
  absl::MutexLock lock(&state_->mu);
  if (state_->cancel != nullptr) PQfreeCancel(state_->cancel);
  state_->cancel = nullptr;
}

void StatementWatchdog::Watch::Progress() {
  const absl::Time deadline = dog_->limit_ == absl::InfiniteDuration()
                                  ? absl::InfiniteFuture()
                                  : absl::Now() + dog_->limit_;
  state_->deadline_ns.store(
      deadline == absl::InfiniteFuture() ? 0 : absl::ToUnixNanos(deadline),
      std::memory_order_relaxed);
}

bool StatementWatchdog::Watch::cancelled() const {
  return state_->cancelled.load(std::memory_order_acquire);
}

void StatementWatchdog::CancelAll() {
  std::vector<std::shared_ptr<Watch::State>> all;
  {
    absl::MutexLock lock(&mu_);
    cancel_all_ = true;
    all = watched_;
  }
  for (const auto& state : all) Cancel(state);
}

void StatementWatchdog::Cancel(const std::shared_ptr<Watch::State>& state) {
  absl::MutexLock lock(&state->mu);
  if (state->cancel == nullptr) return;  // The sender is done with it.
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
    std::vector<std::shared_ptr<Watch::State>> due;
    for (const auto& state : watched_) {
      const int64_t ns = state->deadline_ns.load(std::memory_order_relaxed);
      if (ns == 0 || state->cancelled.load(std::memory_order_relaxed)) continue;
      const absl::Time deadline = absl::FromUnixNanos(ns);
      if (deadline <= now) {
        due.push_back(state);
      } else {
        next = std::min(next, deadline);
      }
    }
    if (!due.empty()) {
      mu_.Unlock();
      for (const auto& state : due) Cancel(state);
      mu_.Lock();
      continue;
    }
    // Wake for the earliest deadline, or when something is watched (a
    // new Watch's deadline is at least limit_ away: checking again after
    // limit_ is soon enough).
    const size_t count = watched_.size();
    auto changed = [this, count]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || watched_.size() > count;
    };
    if (next == absl::InfiniteFuture()) {
      mu_.Await(absl::Condition(&changed));
    } else {
      mu_.AwaitWithDeadline(absl::Condition(&changed), next);
    }
  }
  mu_.Unlock();
}

}  // namespace fencegate::postgres
