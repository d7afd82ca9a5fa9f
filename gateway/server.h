// Copyright fencegate authors.
//
// GatewayServer: owns everything one gateway process runs — the fence
// store, the router and its adapters, the I/O pool, the request gate with
// its policy and audit log, and the gRPC server (Gateway and Lease
// services, standard health service, server reflection), over TLS if
// configured.

#ifndef GATEWAY_SERVER_H_
#define GATEWAY_SERVER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fencing/fence_store.h"
#include "fencing/fencer.h"
#include "fencing/lease_manager.h"
#include "fencing/rocksdb_fence_store.h"
#include "gateway/completion_queues.h"
#include "gateway/config.h"
#include "gateway/connection_limit.h"
#include "gateway/fleet_watch.h"
#include "gateway/gateway_service.h"
#include "gateway/health_service.h"
#include "gateway/io_pool.h"
#include "gateway/lease_service.h"
#include "gateway/route_fences.h"
#include "grpcpp/server.h"
#include "metrics/metrics_server.h"
#include "observability/request_metrics.h"
#include "observability/route_health.h"
#include "pgport/pg_port.h"
#include "postgres/sql_classifier.h"
#include "security/audit_log.h"
#include "security/policy.h"
#include "security/request_gate.h"
#include "storage_adapters/registry.h"
#include "storage_adapters/router.h"
#include "token_watchers/registry.h"
#include "token_watchers/token_watcher.h"

namespace fencegate {

// Thread safety: Shutdown() may be called from any thread, once.
class GatewayServer {
 public:
  // Opens the fence store in <data_dir>/fence, builds the routes' adapters
  // from `adapters`, loads the policy and opens the audit log if
  // configured, builds and starts the configured token watchers from
  // `watchers` (each has reported every current lock holder when this
  // returns), and starts serving. `options` come from ResolveOptions
  // (INVALID_ARGUMENT for options left as constructed). INVALID_ARGUMENT
  // for a bad route, URI, policy, watcher, TLS file or audit log path;
  // UNAVAILABLE if the store is locked by another process, a lock service
  // cannot be read, or the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<GatewayServer>> Start(
      const GatewayOptions& options, const AdapterRegistry& adapters,
      const TokenWatcherRegistry& watchers);

  GatewayServer(const GatewayServer&) = delete;
  GatewayServer& operator=(const GatewayServer&) = delete;
  // Shuts down with a zero grace period if Shutdown() was not called.
  ~GatewayServer();

  // The bound port (useful with port 0).
  int port() const { return port_; }
  // The PostgreSQL port's bound port; 0 if it is off.
  int pg_port() const { return pg_port_ != nullptr ? pg_port_->port() : 0; }
  // The metrics endpoint's bound port; 0 if metrics are off.
  int metrics_port() const {
    return metrics_ != nullptr ? metrics_->port() : 0;
  }

  // Re-reads the policy file (a policy that does not load leaves the one in
  // force, and the log says why) and reopens the audit log. For SIGHUP.
  // Thread safe.
  void Reload();

  // Reports NOT_SERVING, refuses new RPCs, lets in-flight ones finish for up
  // to `grace` (then cancels them), and drains the I/O pool.
  void Shutdown(absl::Duration grace);

 private:
  GatewayServer() = default;

  // A watcher reported `token` as the new holder of lock `domain`: raise
  // that domain's fence to it. On the watcher's thread.
  void RaiseFenceForHolder(absl::string_view kind, const std::string& domain,
                           uint64_t token) const;

  // Starts the PostgreSQL port over the PostgreSQL routes.
  absl::Status StartPgPort(const GatewayOptions& options);

  // The policy as loaded from `path`.
  absl::StatusOr<std::shared_ptr<const Policy>> LoadPolicy() const;

  // First: every component's metrics point into it.
  std::unique_ptr<MetricsServer> metrics_;
  std::unique_ptr<RequestMetrics> request_metrics_;
  std::string policy_path_;
  PolicyEnvironment policy_env_;
  std::unique_ptr<AuditLog> audit_;
  std::unique_ptr<RequestGate> gate_;
  // Before both ports, whose requests and sessions hold reservations.
  std::unique_ptr<MemoryBudget> memory_;
  // Before everything that writes through them or raises their fences.
  // The one SQL classifier of both doors (its cache's gauges beside it);
  // before the router and the port, which use it.
  std::unique_ptr<postgres::SqlClassifier> sql_classifier_;
  std::vector<std::shared_ptr<void>> sql_classifier_gauges_;
  std::unique_ptr<Router> router_;
  std::unique_ptr<RouteFences> route_fences_;
  std::unique_ptr<RocksDbStore> store_;
  // Before the pool: destroyed after it is joined, so that no fence
  // decision calls back into a port that is gone.
  std::unique_ptr<PgPort> pg_port_;
  // Before the Fencer, which runs its queued work on them.
  std::unique_ptr<IoPool> pool_;
  // Fence and Sequence calls' raises, which may wait for the connections
  // that hold a domain (up to the fence schema's raise_wait_ms): threads of
  // their own, so that a waiting raise holds none that others need.
  std::unique_ptr<IoPool> raise_pool_;
  std::unique_ptr<Fencer> fencer_;
  std::unique_ptr<LeaseManager> leases_;
  std::vector<std::unique_ptr<TokenWatcher>> watchers_;
  std::unique_ptr<GatewayService> service_;
  std::unique_ptr<LeaseService> lease_service_;
  // Before server_: it outlives the listener.
  std::unique_ptr<ConnectionLimit> connection_limit_;
  // Before server_, which is destroyed first, as gRPC requires.
  std::unique_ptr<CompletionQueues> queues_;
  std::unique_ptr<HealthService> health_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<RouteHealth> route_health_;
  std::unique_ptr<FleetWatch> fleet_watch_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace fencegate

#endif  // GATEWAY_SERVER_H_
