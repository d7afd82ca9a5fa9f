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

#include <cstddef>
#include <memory>
#include <thread>
#include <vector>

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

// Thread safety: construction, Start() and Stop() from one thread;
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
  grpc::ServerCompletionQueue* queue(size_t i) const {
    return queues_[i].get();
  }

  // Starts one thread per queue, named fg-cq<i>, that hands each event to
  // its tag until the queue is shut down and drained. After the server's
  // BuildAndStart, once every queue has its calls requested.
  void Start();

  // Shuts the queues down and joins their threads once every queue is
  // drained. Only after the server's Shutdown() returned: gRPC requires
  // it, and until then the threads finish the calls in flight. Idempotent.
  void Stop();

 private:
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues_;
  std::vector<std::thread> threads_;
  bool stopped_ = false;
};

}  // namespace fencegate

#endif  // GATEWAY_COMPLETION_QUEUES_H_
