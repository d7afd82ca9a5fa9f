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

#include <atomic>
#include <cstddef>

#include "absl/functional/any_invocable.h"
#include "boost/asio/thread_pool.hpp"

namespace fencegate {

// Thread safety: Post() is safe from any thread, including from work
// running on the pool. Join() must be called once.
class IoPool {
 public:
  explicit IoPool(size_t threads);
  IoPool(const IoPool&) = delete;
  IoPool& operator=(const IoPool&) = delete;
  // Joins if Join() was not called.
  ~IoPool();

  // Runs `work` on a pool thread, in posting order as threads free up.
  // After Join(), runs it on the calling thread instead: work posted late
  // (a turn passed on during shutdown) is done, never dropped.
  void Post(absl::AnyInvocable<void() &&> work);

  // Waits for all posted work to finish and stops the threads.
  void Join();

 private:
  boost::asio::thread_pool pool_;
  std::atomic<bool> joined_{false};
};

}  // namespace fencegate

#endif  // GATEWAY_IO_POOL_H_
