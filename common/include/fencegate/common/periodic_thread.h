// Copyright fencegate authors.
//
// PeriodicThread: one named thread that runs a function every `interval`
// until stopped (the gateway's route health and fleet count). The function
// runs on that thread only, never two at once; Stop() waits for a run in
// progress to end, and none starts after it.
//
// Thread safety: Start() and Stop() from one thread.

#ifndef FENCEGATE_COMMON_PERIODIC_THREAD_H_
#define FENCEGATE_COMMON_PERIODIC_THREAD_H_

#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace fencegate {

class PeriodicThread {
 public:
  PeriodicThread() = default;
  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;
  ~PeriodicThread();  // Stop().

  // Starts the thread, named `name` (at most 15 bytes, as top -H shows
  // it), which runs `fn` every `interval`, the first time one interval
  // from now. At most once.
  void Start(std::string name, absl::Duration interval,
             std::function<void()> fn);
  // Stops and joins the thread.
  void Stop();
  // Whether Stop() was called: a long `fn` may check it between steps.
  bool stopping() const;

 private:
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace fencegate

#endif  // FENCEGATE_COMMON_PERIODIC_THREAD_H_
