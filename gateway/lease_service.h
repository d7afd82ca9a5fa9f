// Copyright fencegate authors.
//
// LeaseService: fencegate.v1.Lease on the gateway's completion queues
// (completion_queues.h), over the LeaseManager. KeepAlive and Release run
// on the I/O pool (they sync to disk). Acquire calls the manager on the
// queue's thread, which never blocks: a grant waits for its domain's turn
// holding no thread and is made durable on the I/O pool; a waiting Acquire
// holds no thread either.

#ifndef GATEWAY_LEASE_SERVICE_H_
#define GATEWAY_LEASE_SERVICE_H_

#include "fencegate/v1/lease.grpc.pb.h"
#include "fencing/lease_manager.h"
#include "gateway/io_pool.h"
#include "gateway/unary_call.h"
#include "grpcpp/completion_queue.h"
#include "security/request_gate.h"

namespace fencegate {

// Every RPC passes `gate` first (request_gate.h), with the LEASE permission
// on the lock's name.
//
// Thread safety: safe for concurrent RPCs. `manager`, `pool` and `gate`
// must outlive the service.
class LeaseService {
 public:
  using AcquireCall = UnaryCall<v1::AcquireRequest, v1::AcquireResponse>;
  using KeepAliveCall = UnaryCall<v1::KeepAliveRequest, v1::KeepAliveResponse>;
  using ReleaseCall = UnaryCall<v1::ReleaseRequest, v1::ReleaseResponse>;

  LeaseService(LeaseManager* manager, IoPool* pool, const RequestGate* gate);
  LeaseService(const LeaseService&) = delete;
  LeaseService& operator=(const LeaseService&) = delete;

  // gRPC's view of the service, for ServerBuilder::RegisterService.
  grpc::Service* grpc_service() { return &grpc_service_; }
  // Asks for each RPC's next call on `queue`: after the server started,
  // before the queue's thread does.
  void Listen(Queue queue) const;

  // The handlers, on a queue's thread; each finishes its call once.
  void Acquire(AcquireCall* call);
  void KeepAlive(KeepAliveCall* call);
  void Release(ReleaseCall* call);

 private:
  LeaseManager* const manager_;
  IoPool* const pool_;
  const RequestGate* const gate_;
  v1::Lease::AsyncService grpc_service_;
  const AcquireCall::Method acquire_;
  const KeepAliveCall::Method keep_alive_;
  const ReleaseCall::Method release_;
};

}  // namespace fencegate

#endif  // GATEWAY_LEASE_SERVICE_H_
