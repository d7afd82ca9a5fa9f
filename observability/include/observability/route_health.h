// Copyright fencegate authors.
//
// RouteHealth: each route's storage in the standard gRPC health service, as
// the service name "route/<name>": NOT_SERVING while its adapter's Probe()
// fails (PostgreSQL down, a file root gone), SERVING again once it
// succeeds. The overall status ("") is left alone: it stays what load
// balancers expect of the process. One thread probes every route every
// `interval`; each change is logged.
//
// Thread safety: Start() and Stop() from one thread.

#ifndef OBSERVABILITY_ROUTE_HEALTH_H_
#define OBSERVABILITY_ROUTE_HEALTH_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "fencegate/common/periodic_thread.h"
#include "grpcpp/health_check_service_interface.h"
#include "storage_adapters/storage_adapter.h"

namespace fencegate {

class RouteHealth {
 public:
  // `routes` (name, adapter) and `health` are not owned and must outlive
  // Stop().
  RouteHealth(std::vector<std::pair<std::string, StorageAdapter*>> routes,
              grpc::HealthCheckServiceInterface* health,
              absl::Duration interval);
  RouteHealth(const RouteHealth&) = delete;
  RouteHealth& operator=(const RouteHealth&) = delete;
  ~RouteHealth();  // Stop().

  // Probes every route once (blocking), reports the outcome, and starts the
  // thread that probes from then on.
  void Start();
  // Stops and joins the thread; the statuses stay as last reported.
  void Stop();

 private:
  void ProbeAll();

  const std::vector<std::pair<std::string, StorageAdapter*>> routes_;
  grpc::HealthCheckServiceInterface* const health_;
  const absl::Duration interval_;
  // Used by the probing thread (and Start() before it runs) only.
  absl::flat_hash_map<std::string, bool> serving_;
  PeriodicThread thread_;
};

}  // namespace fencegate

#endif  // OBSERVABILITY_ROUTE_HEALTH_H_
