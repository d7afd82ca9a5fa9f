// Copyright fencegate authors.
//
// GatewayService: the fencegate.v1.Gateway gRPC service on the gateway's
// completion queues (completion_queues.h). Handlers validate the request on
// the queue's thread (cheap, no I/O), then ask the Fencer for the domain's
// turn (the one per-domain serializer) and return; the fenced work runs on
// the I/O pool when the turn comes, and the call is finished from there (or
// from the adapter's thread that completes the write, or from the queue's
// thread when nothing had to wait). Write takes the request's bytes
// (write_request.h), so that a request with too many operations is refused
// before they are built.

#ifndef GATEWAY_GATEWAY_SERVICE_H_
#define GATEWAY_GATEWAY_SERVICE_H_

#include <cstdint>
#include <memory>

#include "fencegate/common/memory_budget.h"
#include "fencegate/v1/gateway.grpc.pb.h"
#include "fencing/fencer.h"
#include "gateway/io_pool.h"
#include "gateway/unary_call.h"
#include "grpcpp/completion_queue.h"
#include "observability/request_metrics.h"
#include "security/request_gate.h"
#include "storage_adapters/router.h"

namespace fencegate {

struct GatewayServiceOptions {
  // Most operations in one Write. Default: 1000.
  uint32_t max_ops_per_write = 1000;
  // Log every accepted write. Default: false.
  bool log_writes = false;
  // Where writes and fences are counted. Not owned; must outlive the
  // service. Default: null (not counted).
  const RequestMetrics* metrics = nullptr;
  // What Writes may hold while they wait and run; one past it is refused
  // with RESOURCE_EXHAUSTED before it is queued. Not owned; must outlive
  // the service. Default: null (unbounded).
  MemoryBudget* memory = nullptr;
};

// Every RPC passes `gate` first (request_gate.h): a request it refuses is
// answered without touching a fence or an adapter.
//
// Thread safety: safe for concurrent RPCs on any number of queues. `fencer`,
// `router`, `pool`, `raise_pool` and `gate` are not owned and must outlive the
// service; `fencer` runs its queued work on `pool`; Fence and Sequence run
// their raise, which may wait for a domain's holders, on `raise_pool`, never on
// `pool`, where GetFence and Writes run.
class GatewayService {
 public:
  using WriteCall = UnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>;
  using FenceCall = UnaryCall<v1::FenceRequest, v1::FenceState>;
  using GetFenceCall = UnaryCall<v1::GetFenceRequest, v1::FenceState>;
  using SequenceCall = UnaryCall<v1::SequenceRequest, v1::FenceState>;

  GatewayService(Fencer* fencer, const Router* router, IoPool* pool,
                 IoPool* raise_pool, const RequestGate* gate,
                 GatewayServiceOptions options);
  GatewayService(const GatewayService&) = delete;
  GatewayService& operator=(const GatewayService&) = delete;

  // gRPC's view of the service, for ServerBuilder::RegisterService.
  grpc::Service* grpc_service() { return &grpc_service_; }
  // Asks for each RPC's next call on `queue`: after the server started,
  // before the queue's thread does.
  void Listen(Queue queue) const;

  // The handlers, on a queue's thread; each finishes its call once.
  void Write(WriteCall* call);
  void Fence(FenceCall* call);
  void GetFence(GetFenceCall* call);
  void Sequence(SequenceCall* call);

 private:
  struct PendingWrite;
  // A Write's checks (CheckWrite, the SQL classified), then Submit; a
  // refusal is counted and answered. Runs on a queue's thread, or on the
  // long-text parser's for a Write of long SQL text.
  void Dispatch(std::unique_ptr<PendingWrite> write);
  // Puts the write through the Fencer (Fencer::Submit): decided on this
  // thread if the write's adapter never blocks in ApplyAsync and the Fencer
  // needs nothing that blocks, else in the domain's turn on the I/O pool;
  // then Reply.
  void Submit(std::unique_ptr<PendingWrite> write);
  // The write's apply for the Fencer: its adapter's ApplyAsync.
  static Fencer::AsyncApply ApplyOf(PendingWrite* w);
  // Fence and Sequence: admits the call, validates its domain, token (if
  // `has_token`) and request_id, then runs `raise` in the domain's turn
  // with the call's AdvanceCheck, logs, audits and replies with the fence.
  // The facts view the request, which outlives the call.
  using RaiseFn =
      absl::AnyInvocable<absl::StatusOr<FenceDecision>(const Fencer::Turn&,
                                                       const AdvanceCheck*) &&>;
  template <typename Call>
  void RaiseInTurn(Call* call, const CallFacts& facts, bool has_token,
                   RaiseFn raise);
  // Counts and answers a Write refused before it was queued.
  void Refuse(const PendingWrite& write, WriteCall* call,
              const absl::Status& status);
  // Counts a finished Write.
  void Count(const PendingWrite& write, const absl::Status& status) const;
  // Logs, counts and audits the write's outcome, then finishes the RPC
  // (after which the server may be destroyed; the Fencer has passed the
  // domain's turn on before).
  void Reply(std::unique_ptr<PendingWrite> write,
             absl::StatusOr<FenceDecision> decision);

  Fencer* const fencer_;
  const Router* const router_;
  IoPool* const pool_;
  IoPool* const raise_pool_;
  const RequestGate* const gate_;
  const GatewayServiceOptions options_;
  // What gRPC sees: every method asked for on the queues (Write as bytes).
  using GrpcService = v1::Gateway::WithRawMethod_Write<
      v1::Gateway::WithAsyncMethod_Fence<v1::Gateway::WithAsyncMethod_GetFence<
          v1::Gateway::WithAsyncMethod_Sequence<v1::Gateway::Service>>>>;
  GrpcService grpc_service_;
  const WriteCall::Method write_;
  const FenceCall::Method fence_;
  const GetFenceCall::Method get_fence_;
  const SequenceCall::Method sequence_;
};

}  // namespace fencegate

#endif  // GATEWAY_GATEWAY_SERVICE_H_
