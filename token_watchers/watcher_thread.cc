// Copyright fencegate authors.

#include "token_watchers/watcher_thread.h"

#include <string>
#include <utility>

#include "fencegate/common/thread_name.h"

namespace fencegate {

WatcherThread::~WatcherThread() {
  if (thread_.joinable()) thread_.join();
}

absl::Status WatcherThread::Start(absl::string_view name,
                                  absl::AnyInvocable<void() &&> body) {
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return absl::FailedPreconditionError("watcher was stopped");
    first_read_done_ = false;
  }
  if (thread_.joinable()) {
    return absl::FailedPreconditionError("watcher already started");
  }
  thread_ =
      std::thread([name = std::string(name), body = std::move(body)]() mutable {
        NameThisThread(name);
        std::move(body)();
      });
  absl::Status first;
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&first_read_done_));
    first = first_read_;
  }
  if (!first.ok()) thread_.join();  // The body has returned.
  return first;
}

void WatcherThread::FirstRead(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  first_read_ = status;
  first_read_done_ = true;
}

void WatcherThread::Stop(absl::FunctionRef<void()> wake) {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    wake();
  }
  if (thread_.joinable()) thread_.join();
}

bool WatcherThread::Stopping() const {
  absl::MutexLock lock(&mu_);
  return stop_;
}

bool WatcherThread::WaitStopped(absl::Duration pause) const {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stop_), pause);
  return stop_;
}

bool WatcherThread::RunUnlessStopped(absl::FunctionRef<void()> fn) {
  absl::MutexLock lock(&mu_);
  if (stop_) return false;
  fn();
  return true;
}

void WatcherThread::RunLocked(absl::FunctionRef<void()> fn) {
  absl::MutexLock lock(&mu_);
  fn();
}

}  // namespace fencegate
