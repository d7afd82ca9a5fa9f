// Copyright fencegate authors.

#include "fencegate/common/periodic_thread.h"

#include <utility>

#include "fencegate/common/thread_name.h"

namespace fencegate {

PeriodicThread::~PeriodicThread() { Stop(); }

void PeriodicThread::Start(std::string name, absl::Duration interval,
                           std::function<void()> fn) {
  thread_ =
      std::thread([this, name = std::move(name), interval, fn = std::move(fn)] {
        NameThisThread(name);
        for (;;) {
          {
            absl::MutexLock lock(&mu_);
            if (mu_.AwaitWithTimeout(absl::Condition(&stop_), interval)) return;
          }
          fn();
        }
      });
}

void PeriodicThread::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

bool PeriodicThread::stopping() const {
  absl::MutexLock lock(&mu_);
  return stop_;
}

}  // namespace fencegate
