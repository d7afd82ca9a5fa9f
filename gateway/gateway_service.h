// Copyright fencegate authors.
//
// GatewayService: the fencegate.v1.Gateway gRPC service on the callback API.
// Handlers validate the request on gRPC's thread (cheap, no I/O), then ask
// the Fencer for the domain's turn (the one per-domain serializer) and
// return; the fenced work runs on the I/O pool when the turn comes, and the
// reactor is finished from there (or from the adapter's thread that
// completes the write). Write takes the request's bytes (write_request.h), so
// that a request with too many operations is refused before they are built.

#ifndef GATEWAY_GATEWAY_SERVICE_H_
#define GATEWAY_GATEWAY_SERVICE_H_

#include <cstdint>
#include <memory>

#include "fencegate/common/memory_budget.h"
#include "fencegate/v1/gateway.grpc.pb.h"
#include "fencing/fencer.h"
#include "gateway/io_pool.h"
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
// Thread safety: safe for concurrent RPCs. `fencer`, `router`, `pool`,
// `raise_pool` and `gate` are not owned and must outlive the service;
// `fencer` runs its queued work on `pool`; Fence and Sequence run their
// raise, which may wait for a domain's holders, on `raise_pool`, never on
// `pool`, where GetFence and Writes run.
class GatewayService final : public v1::Gateway::WithRawCallbackMethod_Write<
                                 v1::Gateway::CallbackService> {
 public:
  GatewayService(Fencer* fencer, const Router* router, IoPool* pool,
                 IoPool* raise_pool, const RequestGate* gate,
                 GatewayServiceOptions options);

  grpc::ServerUnaryReactor* Write(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Fence(grpc::CallbackServerContext* context,
                                  const v1::FenceRequest* request,
                                  v1::FenceState* response) override;
  grpc::ServerUnaryReactor* GetFence(grpc::CallbackServerContext* context,
                                     const v1::GetFenceRequest* request,
                                     v1::FenceState* response) override;
  grpc::ServerUnaryReactor* Sequence(grpc::CallbackServerContext* context,
                                     const v1::SequenceRequest* request,
                                     v1::FenceState* response) override;

 private:
  struct PendingWrite;
  // A Write's checks (CheckWrite, the SQL classified), then Submit; a
  // refusal is counted and answered. Runs on gRPC's thread, or on the
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
  grpc::ServerUnaryReactor* RaiseInTurn(grpc::CallbackServerContext* context,
                                        const CallFacts& facts, bool has_token,
                                        v1::FenceState* response,
                                        RaiseFn raise);
  // Counts and answers a Write refused before it was queued.
  grpc::ServerUnaryReactor* Refuse(const PendingWrite& write,
                                   grpc::CallbackServerContext* context,
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
};

}  // namespace fencegate

#endif  // GATEWAY_GATEWAY_SERVICE_H_
