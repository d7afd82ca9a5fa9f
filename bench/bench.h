// Copyright fencegate authors.
//
// fencegate-bench: shared pieces of the harness — the environment it starts
// (PostgreSQL, pgbouncer, gateway); runs and reports are in run_stats.h.

#ifndef BENCH_BENCH_H_
#define BENCH_BENCH_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bench/cpu_meter.h"
#include "bench/run_stats.h"
#include "bench/token_sources.h"
#include "fencegate/client/tls.h"
#include "tests/etcd_server.h"
#include "tests/fixtures.h"
#include "tests/postgres_server.h"
#include "tests/redis_server.h"
#include "tests/zookeeper_server.h"

namespace fencegate::bench {

// What the harness runs against; started by Environment::Start unless given.
struct EnvironmentOptions {
  // libpq DSN of an existing PostgreSQL; empty starts a throwaway one.
  std::string pg_dsn;
  // libpq DSN of an existing pgbouncer; empty starts one if installed.
  std::string pgbouncer_dsn;
  // Directory for the gateway's data and the servers' files.
  std::string work_dir;
  // Extra gateway flags.
  std::vector<std::string> gateway_flags;
  // The throwaway PostgreSQL without fsync (commits do not wait for the
  // disk); off: PostgreSQL's default durability, as production runs it.
  bool pg_fast = false;
  // The gateway's PostgreSQL route's pool_size: how many transactions it
  // runs at once. On two cores shared with PostgreSQL and the harness, 4
  // measured best of 2, 4, 8 (the adapter's default) and 64.
  uint64_t pg_pool_size = 4;
  // More of the route URI's query (e.g. "held_domains=0"), appended.
  std::string pg_route_params = {};
  // Start the gateway (and its variants). Off for scenarios that run their
  // own gateways (chaos).
  bool start_gateway = true;
  // Start a throwaway etcd (if /usr/bin/etcd exists) and have the gateway
  // follow its locks.
  bool start_etcd = true;
  // Also start a second gateway with the same routes serving mTLS with a
  // policy (certificates made with openssl in work_dir), for the -mtls
  // targets.
  bool start_mtls_gateway = false;
  // Also start a gateway like the first with metrics on (--metrics_listen),
  // for the -metrics targets.
  bool start_metrics_gateway = false;
  // Start three throwaway redis-servers (if /usr/bin/redis-server exists),
  // for the safety scenario's Redis and Redlock sources.
  bool start_redis = true;
  // Start a throwaway ZooKeeper (if Debian's zookeeper and java are there),
  // for the safety scenario's ZooKeeper source.
  bool start_zookeeper = true;
};

class Environment {
 public:
  static absl::StatusOr<std::unique_ptr<Environment>> Start(
      const EnvironmentOptions& options);
  ~Environment();  // Stops what it started.

  // libpq keyword/value DSN of PostgreSQL.
  const std::string& pg_dsn() const { return pg_dsn_; }
  // The PostgreSQL it started; null for an existing one (--pg_dsn).
  testing::PostgresServer* postgres() const { return pg_.get(); }
  // postgres:// URI of PostgreSQL, for a gateway route.
  const std::string& pg_uri() const { return pg_uri_; }
  // Empty if pgbouncer is not available.
  const std::string& pgbouncer_dsn() const { return pgbouncer_dsn_; }
  // Empty if no gateway was started.
  std::string gateway_address() const {
    return gateway_ != nullptr ? gateway_->address() : "";
  }
  // A libpq DSN of the gateway's PostgreSQL port (--pg_listen), whose
  // session is fenced at (`domain`, `token`); empty if no gateway runs.
  std::string pgwire_dsn(const std::string& domain, uint64_t token) const;
  // The address of a variant gateway ("mtls", "metrics"); empty if not
  // started.
  std::string variant_address(const std::string& variant) const;
  // The client files that reach the mTLS gateway.
  const client::TlsFiles& mtls_client() const { return mtls_client_; }
  // "host:port" of each redis-server started; empty if none.
  std::vector<std::string> redis_endpoints() const;
  // Empty if ZooKeeper is not available.
  std::string zookeeper_endpoint() const {
    return zookeeper_ != nullptr ? zookeeper_->endpoint() : "";
  }
  // Empty if etcd is not available.
  std::string etcd_endpoint() const {
    return etcd_ != nullptr ? etcd_->endpoint() : "";
  }
  const std::string& data_dir() const { return data_dir_; }
  // A worker's flags for `source`, taking leases from `gateway`, with this
  // environment's servers (token_sources.h).
  SourceFlags source_flags(const std::string& source,
                           const std::string& gateway) const;
  // Runs `sql` as PostgreSQL's superuser; UNAVAILABLE with the error.
  absl::Status Exec(const std::string& sql) const;
  // Meters the CPU of the processes the environment started (PostgreSQL
  // only when it started it) and of the harness; of the `variant` gateway
  // rather than the first one if it names one.
  CpuMeter cpu_meter(const std::string& variant = "") const;

 private:
  Environment() = default;
  absl::Status StartPgbouncer(int pg_port);
  absl::Status StartMtlsGateway(const std::string& work_dir,
                                const std::vector<std::string>& flags);
  // A gateway with the first one's `flags` but its own data directory and
  // file route and no watchers, plus `extra`.
  absl::StatusOr<std::unique_ptr<testing::GatewayProcess>> StartVariant(
      const std::string& work_dir, const std::string& variant,
      const std::vector<std::string>& flags,
      const std::vector<std::string>& extra);

  std::unique_ptr<testing::PostgresServer> pg_;
  std::unique_ptr<testing::EtcdServer> etcd_;
  std::vector<std::unique_ptr<testing::RedisServer>> redis_;
  std::unique_ptr<testing::ZooKeeperServer> zookeeper_;
  std::unique_ptr<testing::GatewayProcess> gateway_;
  std::map<std::string, std::unique_ptr<testing::GatewayProcess>> variants_;
  client::TlsFiles mtls_client_;
  std::string pg_dsn_, pg_uri_, pgbouncer_dsn_, data_dir_;
  std::string pgbouncer_dir_;
  int pgbouncer_pid_ = 0;
  // The main gateway's PostgreSQL port.
  int pgwire_port_ = 0;
};

}  // namespace fencegate::bench

#endif  // BENCH_BENCH_H_
