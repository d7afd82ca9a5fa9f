// Copyright fencegate authors.
//
// DomainTurns: the one serializer of a fencing domain's work. Every step
// that reads or moves a domain's fence (a Write's check, record and apply;
// Fence, Sequence, a watcher's handover, a lease grant, learning a
// storage's token) runs in the domain's turn, and turns pass in the order
// they were asked for (first come, first served). Different domains run in
// parallel.
//
// A turn is asked for in one of three ways:
//   - TryTake(): the turn now, on the caller's thread, if nobody holds it
//     or waits for it; never blocks.
//   - Queue(): work to run when the turn comes, on the Runner (the I/O
//     pool in the gateway); never blocks, and a domain whose work waits
//     holds no thread while it waits. When its work finishes, a busy
//     domain's next work goes to the back of the Runner's queue, so one
//     busy domain never starves the others.
//   - Wait(): blocks the calling thread until the turn comes; for threads
//     of their own (watchers, tools, tests), never for a Runner's thread.
//
// A Turn is not tied to a thread: work that completes later (a write whose
// storage calls back) moves its Turn there and releases it there. State
// exists only for domains whose turn is held: an idle domain costs nothing.

#ifndef FENCING_DOMAIN_TURNS_H_
#define FENCING_DOMAIN_TURNS_H_

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace fencegate {

// Thread safety: every method, and Turn::Release(), is safe from any
// thread. Every Turn must be released before the DomainTurns is destroyed
// (destroying it with a turn held or asked for is a fatal error).
class DomainTurns {
 public:
  // Runs `work` later on a thread that may block (the I/O pool). An empty
  // Runner runs it on the calling thread: the thread that queues work for
  // a free domain, or releases the turn that work waited for.
  using Runner = std::function<void(absl::AnyInvocable<void() &&> work)>;

  explicit DomainTurns(Runner runner);
  DomainTurns(const DomainTurns&) = delete;
  DomainTurns& operator=(const DomainTurns&) = delete;
  ~DomainTurns();

  // A domain's turn, held until Release() or destruction; the domain's
  // next work starts after it. Move-only; a moved-from Turn holds nothing.
  class Turn {
   public:
    Turn(Turn&& other) noexcept;
    Turn& operator=(Turn&&) = delete;
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;
    ~Turn();

    // Passes the turn on now, from any thread. Idempotent.
    void Release();
    // The domain whose turn this is.
    const std::string& domain() const { return domain_; }
    // False once released or moved from.
    bool held() const { return owner_ != nullptr; }

   private:
    friend class DomainTurns;
    Turn(DomainTurns* owner, std::string domain);
    DomainTurns* owner_;
    std::string domain_;
  };
  using Work = absl::AnyInvocable<void(Turn) &&>;

  // The domain's turn if nobody holds it or waits for it; std::nullopt
  // otherwise. Never blocks.
  std::optional<Turn> TryTake(absl::string_view domain)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Runs `work` with the domain's turn on the Runner, after every turn
  // asked for earlier. Never blocks. The turn passes on when `work`
  // releases or destroys its Turn.
  void Queue(absl::string_view domain, Work work) ABSL_LOCKS_EXCLUDED(mu_);

  // Blocks until the domain's turn comes, after every turn asked for
  // earlier, and returns it. Not from a Runner's thread: a pool whose
  // threads wait for turns that only its queued work can pass on
  // deadlocks.
  Turn Wait(absl::string_view domain) ABSL_LOCKS_EXCLUDED(mu_);

  // Aborts the process unless `turn` is held and is one of this object's:
  // a step that needs a domain's turn and is handed a released or foreign
  // one would break the domain's order (a broken invariant).
  void CheckHeld(const Turn& turn) const;

 private:
  // One asked-for turn: queued work, or a blocked Wait() (`ready` set).
  struct Waiter {
    Work work;
    absl::Notification* ready = nullptr;
  };
  // Passes the domain's turn to its first waiter, or frees the domain.
  void PassOn(const std::string& domain) ABSL_LOCKS_EXCLUDED(mu_);
  // Runs `work` with the domain's turn, through the Runner.
  void Start(std::string domain, Work work) ABSL_LOCKS_EXCLUDED(mu_);

  const Runner runner_;
  absl::Mutex mu_;
  // Domains whose turn is held; the value holds who waits, in order
  // (allocated on the first wait).
  absl::flat_hash_map<std::string, std::unique_ptr<std::deque<Waiter>>> held_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace fencegate

#endif  // FENCING_DOMAIN_TURNS_H_
