// Copyright fencegate authors.
//
// LeaseService: fencegate.v1.Lease on the gRPC callback API, over the
// LeaseManager. Handlers validate and hand the work to the I/O pool (grants
// sync to disk); a waiting Acquire holds no thread while it waits.

#ifndef GATEWAY_LEASE_SERVICE_H_
#define GATEWAY_LEASE_SERVICE_H_

#include "fencegate/v1/lease.grpc.pb.h"
#include "fencing/lease_manager.h"
#include "gateway/domain_executor.h"
#include "security/request_gate.h"

namespace fencegate {

// Every RPC passes `gate` first (request_gate.h), with the LEASE permission
// on the lock's name.
//
// Thread safety: safe for concurrent RPCs. `manager`, `executor` and `gate`
// must outlive the service.
class LeaseService final : public v1::Lease::CallbackService {
 public:
  LeaseService(LeaseManager* manager, DomainExecutor* executor,
               const RequestGate* gate);

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
  DomainExecutor* const executor_;
  const RequestGate* const gate_;
};

}  // namespace fencegate

#endif  // GATEWAY_LEASE_SERVICE_H_
