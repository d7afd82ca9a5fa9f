// Copyright fencegate authors.

#include "storage_adapters/postgres/batch_queue.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "fencegate/common/sync_point.h"

namespace fencegate::postgres {

BatchQueue::BatchQueue(Options options, Driver* driver)
    : options_(options), driver_(driver) {}

BatchQueue::~BatchQueue() = default;

size_t BatchQueue::ShareLocked() const {
  if (options_.per_caller > 0) return options_.per_caller;
  if (!options_.fair_share) return 0;
  const size_t connections = static_cast<size_t>(options_.connections);
  if (connections <= 1) return 1;
  const size_t active = std::max<size_t>(1, active_.size());
  // Alone, a caller leaves one connection for whoever comes next.
  return std::clamp<size_t>((connections + active - 1) / active, 1,
                            connections - 1);
}

bool BatchQueue::AtShareLocked(const std::string& caller, size_t share) const {
  if (share == 0 || caller.empty()) return false;
  auto it = carrying_.find(caller);
  return it != carrying_.end() && it->second >= share;
}

void BatchQueue::RefLocked(const std::string& caller) {
  if (!caller.empty()) ++active_[caller];
}

void BatchQueue::UnrefLocked(const std::string& caller) {
  if (caller.empty()) return;
  auto it = active_.find(caller);
  if (it != active_.end() && --it->second == 0) active_.erase(it);
}

void BatchQueue::UnrefAllLocked(
    const std::deque<std::unique_ptr<QueuedWrite>>& writes) {
  for (const std::unique_ptr<QueuedWrite>& w : writes) UnrefLocked(w->caller);
}

size_t BatchQueue::TakeableLocked() const {
  const size_t share = ShareLocked();
  if (share == 0) return queue_.size();
  bool any_at_share = false;
  for (const auto& [caller, connections] : carrying_) {
    if (connections >= share) any_at_share = true;
  }
  if (!any_at_share) return queue_.size();
  size_t takeable = 0;
  for (const std::unique_ptr<QueuedWrite>& w : queue_) {
    if (!AtShareLocked(w->caller, share)) ++takeable;
  }
  return takeable;
}

Batch BatchQueue::TakeLocked(Connection* conn) {
  Batch batch;
  std::vector<std::string> callers;
  const size_t share = ShareLocked();
  const absl::Time now = options_.observe_wait ? absl::Now() : absl::Time();
  for (auto it = queue_.begin();
       it != queue_.end() && batch.size() < options_.max_batch;) {
    const std::string& caller = (*it)->caller;
    const bool counted =
        share == 0 || caller.empty() ||
        std::find(callers.begin(), callers.end(), caller) != callers.end();
    if (!counted) {
      // A caller at its share waits, in order, for one of its batches.
      if (AtShareLocked(caller, share)) {
        ++it;
        continue;
      }
      callers.push_back(caller);
      ++carrying_[caller];
      RefLocked(caller);
    }
    if (options_.observe_wait) options_.observe_wait(now - (*it)->queued_at);
    UnrefLocked(caller);
    batch.push_back(std::move(*it));
    it = queue_.erase(it);
    ++batch.back()->attempts;
    // Its session is reset after it, and if it fails, its transaction
    // block stays open until the connection is dropped: nothing follows it.
    // One calling code outside pg_catalog may change the session: it is
    // checked (the tripwire) before another Write runs there.
    if (batch.back()->dirty || batch.back()->opaque) break;
  }
  if (!callers.empty()) callers_of_[conn] = std::move(callers);
  return batch;
}

void BatchQueue::ReleaseCallersLocked(Connection* conn) {
  auto it = callers_of_.find(conn);
  if (it == callers_of_.end()) return;
  for (const std::string& caller : it->second) {
    auto c = carrying_.find(caller);
    if (--c->second == 0) carrying_.erase(c);
    UnrefLocked(caller);
  }
  callers_of_.erase(it);
}

absl::Time BatchQueue::OldestTakeableLocked() const {
  const size_t share = ShareLocked();
  absl::Time oldest = absl::InfiniteFuture();
  for (const std::unique_ptr<QueuedWrite>& w : queue_) {
    if (!AtShareLocked(w->caller, share)) {
      oldest = std::min(oldest, w->queued_at);
    }
  }
  return oldest;
}

absl::Time BatchQueue::NextTickLocked(absl::Time now) const {
  if (queue_.empty()) return absl::InfiniteFuture();
  absl::Time oldest = absl::InfiniteFuture();
  for (const std::unique_ptr<QueuedWrite>& w : queue_) {
    oldest = std::min(oldest, w->queued_at);
  }
  absl::Time next = oldest + options_.wait;
  const bool can_spread =
      options_.spread_after > absl::ZeroDuration() && opening_ == 0 &&
      (!idle_.empty() ||
       open_.size() < static_cast<size_t>(options_.connections));
  // Writes of a caller at its share wait for its batches, not a spread.
  if (can_spread) {
    const absl::Time takeable = OldestTakeableLocked();
    if (takeable != absl::InfiniteFuture()) {
      next = std::min(next, takeable + options_.spread_after);
    }
  }
  // Not in the past: a tick that found nothing to do asks again later.
  return std::max(next, now + absl::Milliseconds(1));
}

void BatchQueue::WantTickLocked(absl::Time now, absl::Time* ask) {
  const absl::Time next = NextTickLocked(now);
  if (next < tick_at_) {
    tick_at_ = next;
    *ask = next;
  }
}

BatchQueue::Connection* BatchQueue::PlaceQueuedLocked(Batch* batch,
                                                      bool* open) {
  // Busy connections take up to max_batch queued Writes each when their
  // batch ends, and opening ones when they are ready (unless spread_after
  // is zero: then neither counts).
  if (options_.spread_after > absl::ZeroDuration()) {
    const size_t carrying =
        open_.size() - idle_.size() + static_cast<size_t>(opening_);
    if (TakeableLocked() <= carrying * options_.max_batch) return nullptr;
  } else if (TakeableLocked() == 0) {
    return nullptr;  // Every queued Write's caller is at its share.
  }
  if (!idle_.empty()) {
    Connection* conn = idle_.back();
    *batch = TakeLocked(conn);
    if (batch->empty()) return nullptr;
    idle_.pop_back();
    return conn;
  }
  if (open_.size() + static_cast<size_t>(opening_) <
      static_cast<size_t>(options_.connections)) {
    ++opening_;
    *open = true;
  }
  return nullptr;
}

void BatchQueue::Add(std::unique_ptr<QueuedWrite> w) {
  Connection* conn = nullptr;
  Batch batch;
  bool open = false;
  absl::Time tick = absl::InfiniteFuture();
  {
    absl::ReleasableMutexLock lock(&mu_);
    // Checked and queued under one lock: nothing is queued after Abandon()
    // emptied the queue.
    if (!refusing_.ok()) {
      absl::Status refused = refusing_;
      lock.Release();
      std::move(w->done)(std::move(refused));
      return;
    }
    const absl::Time now = w->queued_at;
    RefLocked(w->caller);
    queue_.push_back(std::move(w));
    FENCEGATE_SYNC_POINT("PostgresAdapter::ApplyAsync:Queued");
    if (queue_.size() == 1 && !idle_.empty() && idle_.size() == open_.size()) {
      // The light-load path: this thread sends it.
      conn = idle_.back();
      idle_.pop_back();
      batch = TakeLocked(conn);
    } else {
      conn = PlaceQueuedLocked(&batch, &open);
      WantTickLocked(now, &tick);
    }
  }
  if (conn != nullptr) driver_->Send(conn, std::move(batch));
  if (open) driver_->Open();
  if (tick != absl::InfiniteFuture()) driver_->TickAt(tick);
}

BatchQueue::Connection* BatchQueue::NextForLocked(Connection* conn,
                                                  Batch* batch) {
  if (!queue_.empty()) {
    *batch = TakeLocked(conn);
    if (!batch->empty()) return conn;
  }
  idle_.push_back(conn);
  return nullptr;
}

void BatchQueue::Done(Connection* conn, bool usable, Batch retries) {
  // The batches to send: this connection's next, and more if the callers
  // it carried were at their share and idle connections can take their
  // Writes now.
  std::vector<std::pair<Connection*, Batch>> sends;
  bool open = false;
  absl::Time tick = absl::InfiniteFuture();
  std::unique_ptr<Connection> dropped;
  std::deque<std::unique_ptr<QueuedWrite>> refused;
  absl::Status refusal;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    if (!refusing_.ok()) {
      // Abandoned: nothing is sent again.
      for (std::unique_ptr<QueuedWrite>& w : retries) {
        refused.push_back(std::move(w));
      }
      retries.clear();
    }
    for (auto it = retries.rbegin(); it != retries.rend(); ++it) {
      (*it)->queued_at = now;
      RefLocked((*it)->caller);
      queue_.push_front(std::move(*it));
    }
    ReleaseCallersLocked(conn);
    if (usable) {
      Batch batch;
      if (Connection* next = NextForLocked(conn, &batch); next != nullptr) {
        sends.emplace_back(next, std::move(batch));
      }
    } else {
      auto it = std::find_if(open_.begin(), open_.end(),
                             [&](const auto& c) { return c.get() == conn; });
      dropped = std::move(*it);
      open_.erase(it);
    }
    while (!queue_.empty() && !open) {
      Batch batch;
      Connection* next = PlaceQueuedLocked(&batch, &open);
      if (next == nullptr) break;
      sends.emplace_back(next, std::move(batch));
    }
    WantTickLocked(now, &tick);
    refusal = refusing_;
  }
  dropped.reset();
  FailAll(std::move(refused), refusal);
  for (auto& [next, batch] : sends) driver_->Send(next, std::move(batch));
  if (open) driver_->Open();
  if (tick != absl::InfiniteFuture()) driver_->TickAt(tick);
}

void BatchQueue::Opened(std::unique_ptr<Connection> conn) {
  Connection* next = nullptr;
  Batch batch;
  {
    absl::MutexLock lock(&mu_);
    --opening_;
    open_.push_back(std::move(conn));
    next = NextForLocked(open_.back().get(), &batch);
  }
  if (next != nullptr) driver_->Send(next, std::move(batch));
}

void BatchQueue::OpenFailed(const absl::Status& error) {
  std::deque<std::unique_ptr<QueuedWrite>> failed;
  {
    absl::MutexLock lock(&mu_);
    --opening_;
    // Writes that waited for a busy or opening connection still may be
    // taken; with none, no connection will take them.
    if (open_.size() == idle_.size() && opening_ == 0) {
      UnrefAllLocked(queue_);
      failed.swap(queue_);
    }
  }
  FailAll(std::move(failed), error);
}

void BatchQueue::Tick(absl::Time now) {
  std::deque<std::unique_ptr<QueuedWrite>> expired;
  std::deque<std::unique_ptr<QueuedWrite>> expired_at_share;
  Connection* conn = nullptr;
  Batch batch;
  bool open = false;
  absl::Time tick = absl::InfiniteFuture();
  {
    absl::MutexLock lock(&mu_);
    tick_at_ = absl::InfiniteFuture();
    const size_t share = ShareLocked();
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (now - (*it)->queued_at >= options_.wait) {
        if (options_.observe_wait)
          options_.observe_wait(now - (*it)->queued_at);
        UnrefLocked((*it)->caller);
        (AtShareLocked((*it)->caller, share) ? expired_at_share : expired)
            .push_back(std::move(*it));
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
    if (!queue_.empty() && options_.spread_after > absl::ZeroDuration() &&
        opening_ == 0 &&
        now - OldestTakeableLocked() >= options_.spread_after) {
      // The oldest waited too long for the busy connections: another one.
      if (!idle_.empty()) {
        FENCEGATE_SYNC_POINT("PostgresAdapter::Spread");
        conn = idle_.back();
        batch = TakeLocked(conn);
        if (batch.empty()) {
          conn = nullptr;
        } else {
          idle_.pop_back();
        }
      } else if (open_.size() < static_cast<size_t>(options_.connections) &&
                 TakeableLocked() > 0) {
        FENCEGATE_SYNC_POINT("PostgresAdapter::Spread");
        ++opening_;
        open = true;
      }
    }
    WantTickLocked(now, &tick);
  }
  FailAll(std::move(expired),
          absl::UnavailableError(absl::StrCat(
              options_.label, ": waited ", absl::FormatDuration(options_.wait),
              " for one of ", options_.connections,
              " connections (all busy or connecting); nothing was sent")));
  if (!expired_at_share.empty()) {
    FailAll(
        std::move(expired_at_share),
        absl::UnavailableError(absl::StrCat(
            options_.label, ": waited ", absl::FormatDuration(options_.wait),
            " while this caller's earlier Writes occupied ",
            options_.per_caller, " of the ", options_.connections,
            " connections, its share (max_connections_per_caller); "
            "nothing was sent")));
  }
  if (conn != nullptr) driver_->Send(conn, std::move(batch));
  if (open) driver_->Open();
  if (tick != absl::InfiniteFuture()) driver_->TickAt(tick);
}

void BatchQueue::Abandon(const absl::Status& error) {
  std::deque<std::unique_ptr<QueuedWrite>> failed;
  {
    absl::MutexLock lock(&mu_);
    refusing_ = error;
    UnrefAllLocked(queue_);
    failed.swap(queue_);
  }
  FailAll(std::move(failed), error);
}

void BatchQueue::Stop(const absl::Status& error) {
  std::deque<std::unique_ptr<QueuedWrite>> failed;
  {
    absl::MutexLock lock(&mu_);
    auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return open_.size() == idle_.size() && opening_ == 0;
    };
    mu_.Await(absl::Condition(&settled));
    if (refusing_.ok()) refusing_ = error;
    UnrefAllLocked(queue_);
    failed.swap(queue_);
  }
  FailAll(std::move(failed), error);
}

void BatchQueue::CloseIdle() {
  CloseIdleIf([](const Connection&) { return true; });
}

size_t BatchQueue::CloseIdleIf(
    absl::FunctionRef<bool(const Connection&)> close) {
  std::vector<std::unique_ptr<Connection>> closed;
  {
    absl::MutexLock lock(&mu_);
    for (auto idle = idle_.begin(); idle != idle_.end();) {
      Connection* conn = *idle;
      if (!close(*conn)) {
        ++idle;
        continue;
      }
      auto it = std::find_if(open_.begin(), open_.end(),
                             [&](const auto& c) { return c.get() == conn; });
      closed.push_back(std::move(*it));
      open_.erase(it);
      idle = idle_.erase(idle);
    }
  }
  // Destroyed without the lock held.
  return closed.size();
}

BatchQueue::Counts BatchQueue::counts() const {
  absl::MutexLock lock(&mu_);
  return {idle_.size(), open_.size() - idle_.size()};
}

void BatchQueue::FailAll(std::deque<std::unique_ptr<QueuedWrite>> writes,
                         const absl::Status& error) {
  for (std::unique_ptr<QueuedWrite>& w : writes) std::move(w->done)(error);
}

}  // namespace fencegate::postgres
