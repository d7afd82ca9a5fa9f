// Copyright fencegate authors.
//
// DomainExecutor: the bounded I/O pool where blocking work (fence syncs,
// storage writes) runs, off gRPC's threads. Work posted for one domain runs
// one at a time in posting order, so a busy domain occupies at most one pool
// thread; after each item a busy domain goes to the back of the pool's queue,
// so it never starves the others. (A lane exists only while its domain has
// work: an idle domain costs nothing, and the first work of an idle domain
// goes straight to the pool, or runs on the caller's thread if the caller
// takes the domain's Lane with TryAcquire.) Work that finishes later, on
// another thread (a write whose storage completes it), keeps its domain
// busy until it releases the Lane it was given.

#ifndef GATEWAY_DOMAIN_EXECUTOR_H_
#define GATEWAY_DOMAIN_EXECUTOR_H_

#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio/thread_pool.hpp"

namespace fencegate {

// Thread safety: Post(), PostHeld(), TryAcquire(), PostWithLane(), PostAny()
// and Lane::Release() are safe from any thread, including from work
// running on the pool. Every Lane must be released before Join() (the
// pool does not wait for Lanes held elsewhere). Join() must be called once,
// after the last Post().
class DomainExecutor {
 public:
  explicit DomainExecutor(size_t threads);
  DomainExecutor(const DomainExecutor&) = delete;
  DomainExecutor& operator=(const DomainExecutor&) = delete;
  // Joins if Join() was not called.
  ~DomainExecutor();

  // A domain's turn to run: the domain's next work starts only after
  // Release(), which any thread may call once; destroying an unreleased
  // Lane releases it. Move-only.
  class Lane {
   public:
    Lane(Lane&& other) noexcept;
    Lane& operator=(Lane&&) = delete;
    ~Lane();
    void Release();

   private:
    friend class DomainExecutor;
    Lane(DomainExecutor* executor, std::string domain);
    DomainExecutor* executor_;
    std::string domain_;
  };

  // Runs `work` on the pool after all work posted earlier for `domain`.
  void Post(const std::string& domain, absl::AnyInvocable<void() &&> work);

  // Like Post(), but the domain stays busy until `work` releases its Lane.
  void PostHeld(const std::string& domain,
                absl::AnyInvocable<void(Lane) &&> work);

  // The domain's Lane, if the domain has no work running or waiting, for
  // work the caller runs itself (on any thread); std::nullopt otherwise.
  // Work posted for the domain meanwhile waits for the Lane's release.
  std::optional<Lane> TryAcquire(const std::string& domain);

  // Runs `work` on the pool with `lane`, which the caller acquired: the
  // domain's turn goes on.
  void PostWithLane(Lane lane, absl::AnyInvocable<void(Lane) &&> work);

  // Runs `work` on the pool, unordered.
  void PostAny(absl::AnyInvocable<void() &&> work);

  // Waits for all posted work to finish and stops the threads.
  void Join();

 private:
  using Work = absl::AnyInvocable<void(Lane) &&>;
  // Runs `work` of `domain` with the domain's Lane.
  void RunLane(const std::string& domain, Work work);
  // Hands the domain's next item to the pool, or retires the domain's lane
  // if it has none.
  void Next(const std::string& domain);

  boost::asio::thread_pool pool_;
  absl::Mutex mu_;
  // Domains with work running; the value holds what waits behind it
  // (allocated on the first wait).
  absl::flat_hash_map<std::string, std::unique_ptr<std::deque<Work>>> lanes_
      ABSL_GUARDED_BY(mu_);
  bool joined_ = false;
};

}  // namespace fencegate

#endif  // GATEWAY_DOMAIN_EXECUTOR_H_
