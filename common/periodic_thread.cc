// Copyright fencegate authors.

#include "fencegate/common/periodic_thread.h"

#include <pthread.h>

#include <utility>

namespace fencegate {

PeriodicThread::~PeriodicThread() { Stop(); }

void PeriodicThread::Start(std::string name, absl::Duration interval,
                           std::function<void()> fn) {
  thread_ =
      std::thread([this, name = std::move(name), interval, fn = std::move(fn)] {
        pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
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
