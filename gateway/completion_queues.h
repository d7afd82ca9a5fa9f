// Copyright fencegate authors.
//
// CompletionQueues: the gRPC completion queues on which the gateway serves
// its hot RPCs (Write, Fence, GetFence, Sequence, the lease service), one
// queue per thread, the threads the gateway's own (`fg-cq<i>`). A thread
// takes its queue's events one after another and hands each to the tag
// that asked for it (QueueTag). The handlers that run there never block
// (gateway_service.h): work that may block goes to the I/O pool or to an
// adapter's own thread, which finishes the call from there; the finish's
// event comes back to the call's own queue.
//
// Why queues rather than gRPC's callback API: gRPC 1.51's callback API
// hands every call that a thread of the gateway's (the PostgreSQL event
// loop, the fence store's commit thread) finishes to one of its own
// executor threads and wakes it. On a queue the finishing thread sends the
// reply itself, and the queue's thread only frees the call, at its next
// event.

#ifndef GATEWAY_COMPLETION_QUEUES_H_
#define GATEWAY_COMPLETION_QUEUES_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/server_builder.h"

namespace fencegate {

// What a queue's event is handed to: each tag given to gRPC with a queue
// of these is a QueueTag*. `ok` is gRPC's: false for a request the server
// refused (shutting down), or a finish that did not reach the client.
class QueueTag {
 public:
  virtual void Proceed(bool ok) = 0;

 protected:
  ~QueueTag() = default;
};

// A QueueTag that hands the event to a member function of `T`, on the
// queue's thread.
template <typename T>
class MemberTag final : public QueueTag {
 public:
  MemberTag(T* object, void (T::*on)(bool)) : object_(object), on_(on) {}
  void Proceed(bool ok) override { (object_->*on_)(ok); }

 private:
  T* const object_;
  void (T::*const on_)(bool);
};

// The calls that arrived on any queue and are not freed yet. gRPC's
// Server::Shutdown waits for no call served on a completion queue, and a
// queue must not be shut down while a call may still finish to it: the
// queues wait for this count to reach zero first.
//
// Thread safety: thread safe.
class LiveCalls {
 public:
  void Add() { count_.fetch_add(1, std::memory_order_relaxed); }
  // Takes the lock only while WaitForNone() waits (at shutdown), not per
  // call. Sequentially consistent: a Remove() that reaches zero sees the
  // waiter, or the waiter sees zero.
  void Remove() ABSL_LOCKS_EXCLUDED(mu_) {
    if (count_.fetch_sub(1) == 1 && waiting_.load()) {
      absl::MutexLock lock(&mu_);
      none_.SignalAll();
    }
  }
  // Blocks until no call is live.
  void WaitForNone() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    waiting_.store(true);
    while (count_.load() != 0) none_.Wait(&mu_);
    waiting_.store(false);
  }

 private:
  std::atomic<int64_t> count_{0};
  std::atomic<bool> waiting_{false};
  absl::Mutex mu_;
  absl::CondVar none_;
};

// One queue as the services see it: where their calls are asked for, and
// the count every call joins on arrival and leaves when freed.
struct Queue {
  grpc::ServerCompletionQueue* cq = nullptr;
  LiveCalls* live = nullptr;
};

// Thread safety: construction, Start(), WaitForCalls() and Stop() from one
// thread;
// queue() from any thread once Start() returned.
class CompletionQueues {
 public:
  // Adds `count` (at least 1) queues to `builder`: before BuildAndStart.
  CompletionQueues(grpc::ServerBuilder* builder, size_t count);
  CompletionQueues(const CompletionQueues&) = delete;
  CompletionQueues& operator=(const CompletionQueues&) = delete;
  // Stop() must have run if Start() did.
  ~CompletionQueues();

  size_t size() const { return queues_.size(); }
  Queue queue(size_t i) { return {queues_[i].get(), &live_}; }

  // Starts one thread per queue, named fg-cq<i>, that hands each event to
  // its tag until the queue is shut down and drained. After the server's
  // BuildAndStart, once every queue has its calls requested.
  void Start();

  // Blocks until every call that arrived is freed: after the server's
  // Shutdown(), which refuses new calls but does not wait for these; the
  // threads keep serving their events meanwhile.
  void WaitForCalls() { live_.WaitForNone(); }

  // WaitForCalls(), then shuts the queues down and joins their threads
  // once every queue is drained. Only after the server's Shutdown()
  // returned, as gRPC requires. Idempotent.
  void Stop();

 private:
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues_;
  std::vector<std::thread> threads_;
  LiveCalls live_;
  bool stopped_ = false;
};

}  // namespace fencegate

#endif  // GATEWAY_COMPLETION_QUEUES_H_
