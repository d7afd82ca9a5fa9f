// Copyright fencegate authors.
//
// UnaryCall: one unary RPC served on a completion queue
// (completion_queues.h), from the moment gRPC is asked for it until gRPC
// lets go of it. The call owns its context, request and response; its
// handler fills the response and finishes it, from any thread, once.
//
// A call asks for the next call of its method on its queue as soon as it
// arrives, so that each queue always has one of each method's calls asked
// for. It is freed on its queue's thread once two events have come back:
// its finish, and gRPC's word that the call is over (the client hung up,
// cancelled, or its deadline passed, or the finish reached it). Until the
// latter, `context()->IsCancelled()` is false; after it, it says whether the
// client gave up.

#ifndef GATEWAY_UNARY_CALL_H_
#define GATEWAY_UNARY_CALL_H_

#include <functional>
#include <utility>

#include "gateway/completion_queues.h"
#include "grpcpp/completion_queue.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/async_unary_call.h"

namespace fencegate {

template <typename Request, typename Response>
class UnaryCall final {
 public:
  using Writer = grpc::ServerAsyncResponseWriter<Response>;

  // One method's calls: how to ask gRPC for the next one (the generated
  // `Request<Method>(context, request, writer, queue, queue, tag)`), and
  // what handles one that arrived. The handler runs on the queue's thread
  // and never blocks; it must call Finish exactly once, from any thread.
  struct Method {
    std::function<void(grpc::ServerContext*, Request*, Writer*,
                       grpc::ServerCompletionQueue*, void*)>
        request;
    std::function<void(UnaryCall*)> handle;
  };

  // The Method whose calls `service`'s generated `request` asks for (e.g.
  // `&v1::Lease::AsyncService::RequestAcquire`), handled by `handle`.
  // `service` must outlive the Method.
  template <typename Service, typename Base>
  static Method Of(Service* service,
                   void (Base::*request)(grpc::ServerContext*, Request*,
                                         Writer*, grpc::CompletionQueue*,
                                         grpc::ServerCompletionQueue*, void*),
                   std::function<void(UnaryCall*)> handle) {
    return {[service, request](grpc::ServerContext* context, Request* message,
                               Writer* writer,
                               grpc::ServerCompletionQueue* queue, void* tag) {
              (service->*request)(context, message, writer, queue, queue, tag);
            },
            std::move(handle)};
  }

  // Asks for `method`'s next call on `queue`. `method` must outlive every
  // call of it: until the server has shut down and the queue is drained.
  static void Listen(const Method* method, Queue queue) {
    new UnaryCall(method, queue);
  }

  UnaryCall(const UnaryCall&) = delete;
  UnaryCall& operator=(const UnaryCall&) = delete;

  grpc::ServerContext* context() { return &context_; }
  const Request& request() const { return request_; }
  Response* response() { return &response_; }

  // Sends the response (if `status` is OK) or `status` alone. The call may
  // be freed as soon as this returns: touch nothing of it afterwards.
  void Finish(const grpc::Status& status) {
    writer_.Finish(response_, status, &finished_);
  }

 private:
  using Event = MemberTag<UnaryCall>;

  UnaryCall(const Method* method, Queue queue)
      : method_(method), queue_(queue), writer_(&context_) {
    // Before the call is asked for, as gRPC requires.
    context_.AsyncNotifyWhenDone(&over_);
    method_->request(&context_, &request_, &writer_, queue_.cq, &arrived_);
  }
  ~UnaryCall() = default;

  void Arrived(bool ok) {
    // Not ok: the server is shutting down, and the call never began (gRPC
    // then never reports it over either).
    if (!ok) {
      delete this;
      return;
    }
    queue_.live->Add();
    Listen(method_, queue_);
    method_->handle(this);
  }
  // The finish, and gRPC's word that the call is over: both on this queue's
  // thread, so `left_` needs no lock.
  void Ended(bool /*ok*/) {
    if (--left_ > 0) return;
    LiveCalls* live = queue_.live;
    delete this;
    live->Remove();
  }

  const Method* const method_;
  const Queue queue_;
  grpc::ServerContext context_;
  Request request_;
  Response response_;
  Writer writer_;
  Event arrived_{this, &UnaryCall::Arrived};
  Event finished_{this, &UnaryCall::Ended};
  Event over_{this, &UnaryCall::Ended};
  int left_ = 2;
};

}  // namespace fencegate

#endif  // GATEWAY_UNARY_CALL_H_
