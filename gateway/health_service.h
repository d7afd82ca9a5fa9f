// Copyright fencegate authors.
//
// HealthService: the standard grpc.health.v1.Health service (Check and
// Watch) on the gateway's completion queues (completion_queues.h), in place
// of gRPC's default one. gRPC 1.51's default health service is on its
// callback API, whose two executor threads then also poll the gateway's
// sockets: a request one of them reads is handed to a queue's thread, a
// thread hop per request. With every polled service on the gateway's own
// queues, the thread that reads a request is the one that serves it.
//
// As gRPC's default service: the server ("") is known from the start and
// serving; Check of an unknown service is NOT_FOUND; Watch sends the
// status at once (SERVICE_UNKNOWN for an unknown service), then each
// change, until the client ends it or Shutdown(); Shutdown() sets every
// service NOT_SERVING, ends the Watch calls, and ignores later changes.

#ifndef GATEWAY_HEALTH_SERVICE_H_
#define GATEWAY_HEALTH_SERVICE_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "gateway/unary_call.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/completion_queue.h"
#include "grpcpp/health_check_service_interface.h"

namespace fencegate {

// Thread safety: thread safe.
class HealthService final : public grpc::HealthCheckServiceInterface {
 public:
  using Status = grpc::health::v1::HealthCheckResponse::ServingStatus;
  using CheckCall = UnaryCall<grpc::health::v1::HealthCheckRequest,
                              grpc::health::v1::HealthCheckResponse>;
  class WatchCall;

  HealthService();
  HealthService(const HealthService&) = delete;
  HealthService& operator=(const HealthService&) = delete;
  ~HealthService() override;

  // gRPC's view of the service, for ServerBuilder::RegisterService.
  grpc::Service* grpc_service() { return &grpc_service_; }
  // Asks for each RPC's next call on `queue`: after the server started,
  // before the queue's thread does.
  void Listen(Queue queue);

  void SetServingStatus(const std::string& service, bool serving) override
      ABSL_LOCKS_EXCLUDED(mu_);
  void SetServingStatus(bool serving) override ABSL_LOCKS_EXCLUDED(mu_);
  void Shutdown() override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  friend class WatchCall;

  void Check(CheckCall* call) ABSL_LOCKS_EXCLUDED(mu_);
  // What a Watch of `service` is sent now.
  Status StatusOf(const std::string& service) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells every Watch call whose service's status changed its status.
  void Notify() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  grpc::health::v1::Health::AsyncService grpc_service_;
  const CheckCall::Method check_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Status> statuses_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<WatchCall*> watches_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace fencegate

#endif  // GATEWAY_HEALTH_SERVICE_H_
