// Copyright fencegate authors.
//
// IoPool: the bounded pool where blocking work (fence syncs, storage writes,
// lease store writes) runs, off gRPC's threads. It knows nothing of
// domains: a domain's work reaches it through the Fencer's DomainTurns
// (fencing/domain_turns.h), which post it only once the domain's turn has
// come, so a busy domain occupies at most one pool thread and waits
// without one.

#ifndef GATEWAY_IO_POOL_H_
#define GATEWAY_IO_POOL_H_

#include <cstddef>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "fencegate/common/named_thread_pool.h"

namespace fencegate {

// Thread safety: Post() and Join() are safe from any thread; Post() also
// from work running on the pool.
class IoPool {
 public:
  // `threads` threads, each named `name` (thread_name.h).
  IoPool(size_t threads, const std::string& name);
  IoPool(const IoPool&) = delete;
  IoPool& operator=(const IoPool&) = delete;
  // Joins if Join() was not called.
  ~IoPool();

  // Runs `work` on a pool thread, in posting order as threads free up.
  // Once Join() has begun, runs it on the calling thread instead: work
  // posted late (a turn passed on during shutdown) is done, never dropped.
  void Post(absl::AnyInvocable<void() &&> work) ABSL_LOCKS_EXCLUDED(mu_);

  // Waits for all posted work to finish and stops the threads. Idempotent.
  void Join() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  NamedThreadPool pool_;
  absl::Mutex mu_;
  bool joined_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace fencegate

#endif  // GATEWAY_IO_POOL_H_
