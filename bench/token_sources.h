// Copyright fencegate authors.
//
// The token sources the harness's workers take locks from, built from
// flags: the gateway's lease service, etcd, Redis, Redlock, a PostgreSQL
// lock table and ZooKeeper (client/). Shared by the safety and chaos
// workers: the runner passes SourceArgs() to a worker process, which reads
// them back with AddSourceFlags() and calls MakeTokenSource().

#ifndef BENCH_TOKEN_SOURCES_H_
#define BENCH_TOKEN_SOURCES_H_

#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "fencegate/client/token_source.h"
#include "grpcpp/channel.h"

namespace fencegate::bench {

struct TokenSourceConfig {
  // "lease", "etcd", "redis", "redlock", "postgres" or "zookeeper".
  std::string source = "lease";
  // The gateway: the lease service, and where sources that raise the fence
  // on a grant (redis, redlock, postgres, zookeeper) send their Fence.
  std::shared_ptr<grpc::Channel> gateway;
  std::string etcd;       // host:port
  std::string redis;      // host:port list, comma separated
  std::string zookeeper;  // host:port
  std::string pg_dsn;     // libpq DSN of the lock table's database
  // ZooKeeper: the parent znode of the locks.
  std::string zookeeper_path = "/fencegate-bench";
};

// INVALID_ARGUMENT for an unknown source or a missing endpoint; otherwise
// the source's own Create() error.
absl::StatusOr<std::unique_ptr<client::TokenSource>> MakeTokenSource(
    const TokenSourceConfig& config);

// A worker's flags naming its source, its gateway and the servers.
struct SourceFlags {
  std::string source, gateway, pg_dsn, etcd, redis, zookeeper;
};
// Registers --source, --gateway, --pg_dsn, --etcd, --redis, --zookeeper.
void AddSourceFlags(CLI::App& app, SourceFlags* flags);
// Those flags' arguments for a worker process.
std::vector<std::string> SourceArgs(const SourceFlags& flags);
// MakeTokenSource() from a worker's flags; ZooKeeper locks under
// `zookeeper_path`.
absl::StatusOr<std::unique_ptr<client::TokenSource>> MakeTokenSource(
    const SourceFlags& flags, const std::string& zookeeper_path);

}  // namespace fencegate::bench

#endif  // BENCH_TOKEN_SOURCES_H_
