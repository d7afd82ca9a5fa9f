// Copyright fencegate authors.
//
// GatewayService: the fencegate.v1.Gateway gRPC service on the callback API.
// Handlers validate the request on gRPC's thread (cheap, no I/O), then hand
// the fenced work to the DomainExecutor and return; the reactor is finished
// from the I/O thread. Write takes the request's bytes (write_request.h), so
// that a request with too many operations is refused before they are built.

#ifndef GATEWAY_GATEWAY_SERVICE_H_
#define GATEWAY_GATEWAY_SERVICE_H_

#include <cstdint>
#include <memory>

#include "fencegate/v1/gateway.grpc.pb.h"
#include "fencing/fencer.h"
#include "gateway/domain_executor.h"
#include "gateway/memory_budget.h"
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
// Thread safety: safe for concurrent RPCs. `fencer`, `router`, `executor`
// and `gate` are not owned and must outlive the service.
class GatewayService final : public v1::Gateway::WithRawCallbackMethod_Write<
                                 v1::Gateway::CallbackService> {
 public:
  GatewayService(Fencer* fencer, const Router* router, DomainExecutor* executor,
                 const RequestGate* gate, GatewayServiceOptions options);

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
  // Runs the write on this (gRPC's) thread if the Fencer can decide it
  // without blocking (Fencer::TryExecuteAsync); the write's adapter must
  // never block in ApplyAsync. Takes `write` if so; false leaves it.
  bool TryWriteHere(std::unique_ptr<PendingWrite>& write);
  // Checks, records and applies the write, then replies; on the I/O pool.
  void RunWrite(std::unique_ptr<PendingWrite> write);
  // Pool work that runs RunWrite(write) with the domain's Lane.
  absl::AnyInvocable<void(DomainExecutor::Lane) &&> OnPool(
      std::unique_ptr<PendingWrite> write);
  // The write's apply for the Fencer: its adapter's ApplyAsync.
  static Fencer::AsyncApply ApplyOf(PendingWrite* w);
  // Fence and Sequence: admits the call, validates its domain, token (if
  // `has_token`) and request_id, then runs `raise` in the domain's lane with
  // the call's AdvanceCheck, logs, audits and replies with the fence. The facts
  // view the request, which outlives the call.
  using RaiseFn =
      absl::AnyInvocable<absl::StatusOr<FenceDecision>(const AdvanceCheck*) &&>;
  grpc::ServerUnaryReactor* RaiseInLane(grpc::CallbackServerContext* context,
                                        const CallFacts& facts, bool has_token,
                                        v1::FenceState* response,
                                        RaiseFn raise);
  // Counts and answers a Write refused before it was queued.
  grpc::ServerUnaryReactor* Refuse(const PendingWrite& write,
                                   grpc::CallbackServerContext* context,
                                   const absl::Status& status);
  // Counts a finished Write.
  void Count(const PendingWrite& write, const absl::Status& status) const;
  // Releases the write's domain, then finishes the RPC (after which the
  // server may be destroyed).
  void Reply(std::unique_ptr<PendingWrite> write,
             absl::StatusOr<FenceDecision> decision);

  Fencer* const fencer_;
  const Router* const router_;
  DomainExecutor* const executor_;
  const RequestGate* const gate_;
  const GatewayServiceOptions options_;
};

}  // namespace fencegate

#endif  // GATEWAY_GATEWAY_SERVICE_H_
