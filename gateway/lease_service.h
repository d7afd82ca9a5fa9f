// Copyright fencegate authors.
//
// LeaseService: fencegate.v1.Lease on the gRPC callback API, over the
// LeaseManager. KeepAlive and Release run on the I/O pool (they sync to
// disk). Acquire calls the manager on gRPC's thread, which never blocks: a
// grant waits for its domain's turn holding no thread and is made durable
// on the I/O pool; a waiting Acquire holds no thread either.

#ifndef GATEWAY_LEASE_SERVICE_H_
#define GATEWAY_LEASE_SERVICE_H_

#include "fencegate/v1/lease.grpc.pb.h"
#include "fencing/lease_manager.h"
#include "gateway/io_pool.h"
#include "security/request_gate.h"

namespace fencegate {

// Every RPC passes `gate` first (request_gate.h), with the LEASE permission
// on the lock's name.
//
// Thread safety: safe for concurrent RPCs. `manager`, `pool` and `gate`
// must outlive the service.
class LeaseService final : public v1::Lease::CallbackService {
 public:
  LeaseService(LeaseManager* manager, IoPool* pool, const RequestGate* gate);

  grpc::ServerUnaryReactor* Acquire(grpc::CallbackServerContext* context,
                                    const v1::AcquireRequest* request,
                                    v1::AcquireResponse* response) override;
  grpc::ServerUnaryReactor* KeepAlive(grpc::CallbackServerContext* context,
                                      const v1::KeepAliveRequest* request,
                                      v1::KeepAliveResponse* response) override;
  grpc::ServerUnaryReactor* Release(grpc::CallbackServerContext* context,
                                    const v1::ReleaseRequest* request,
                                    v1::ReleaseResponse* response) override;

 private:
  LeaseManager* const manager_;
  IoPool* const pool_;
  const RequestGate* const gate_;
};

}  // namespace fencegate

#endif  // GATEWAY_LEASE_SERVICE_H_
