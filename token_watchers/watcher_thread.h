// Copyright fencegate authors.
//
// WatcherThread (internal to token_watchers/): the thread a token watcher
// follows its lock service on, its stop flag, and the hand-off of the
// thread's first full read to Start() -- the part every watcher shares.
//
// Thread safety: Start() and Stop() from one thread at a time; the rest from
// any thread.

#ifndef TOKEN_WATCHERS_WATCHER_THREAD_H_
#define TOKEN_WATCHERS_WATCHER_THREAD_H_

#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace fencegate {

class WatcherThread {
 public:
  WatcherThread() = default;
  WatcherThread(const WatcherThread&) = delete;
  WatcherThread& operator=(const WatcherThread&) = delete;
  // The owner must have called Stop() (its `wake` may use the owner).
  ~WatcherThread();

  // Runs `body` on a new thread named `name` (thread_name.h) and returns
  // the status `body` passes to FirstRead(). If that is not OK, `body` must
  // return at once; the thread is joined and Start() may be called again.
  // FAILED_PRECONDITION if running or stopped.
  absl::Status Start(absl::string_view name,
                     absl::AnyInvocable<void() &&> body);
  // For `body`: its first full read is over (called once per Start()).
  void FirstRead(const absl::Status& status);

  // Raises the stop flag, runs `wake` with it raised (under the lock that
  // RunUnlessStopped() takes, to cancel a blocking call), and joins the
  // thread. Idempotent.
  void Stop(absl::FunctionRef<void()> wake);

  bool Stopping() const;
  // Waits for `pause` or Stop(); true if stopped.
  bool WaitStopped(absl::Duration pause) const;
  // Runs `fn` under the stop flag's lock unless stopped; false if stopped.
  // A blocking call registered this way is always seen by Stop()'s `wake`.
  bool RunUnlessStopped(absl::FunctionRef<void()> fn);
  // Runs `fn` under the stop flag's lock.
  void RunLocked(absl::FunctionRef<void()> fn);

 private:
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool first_read_done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status first_read_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace fencegate

#endif  // TOKEN_WATCHERS_WATCHER_THREAD_H_
