// Copyright fencegate authors.

#include "bench/token_sources.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "fencegate/client/etcd/etcd_token_source.h"
#include "fencegate/client/lease_token_source.h"
#include "fencegate/client/postgres/postgres_token_source.h"
#include "fencegate/client/redis/redis_token_source.h"
#include "fencegate/client/redis/redlock_token_source.h"
#include "fencegate/client/zookeeper/zookeeper_token_source.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace fencegate::bench {
namespace {

// Moves a concrete source into the interface's pointer.
template <typename T>
absl::StatusOr<std::unique_ptr<client::TokenSource>> Upcast(
    absl::StatusOr<std::unique_ptr<T>> made) {
  if (!made.ok()) return made.status();
  return std::unique_ptr<client::TokenSource>(*std::move(made));
}

absl::Status Missing(const TokenSourceConfig& c, const char* what) {
  return absl::InvalidArgumentError(
      absl::StrCat("token source ", c.source, " needs ", what));
}

}  // namespace

absl::StatusOr<std::unique_ptr<client::TokenSource>> MakeTokenSource(
    const TokenSourceConfig& c) {
  if (c.source == "lease") {
    if (c.gateway == nullptr) return Missing(c, "a gateway");
    return std::unique_ptr<client::TokenSource>(
        std::make_unique<client::LeaseTokenSource>(c.gateway));
  }
  if (c.source == "etcd") {
    if (c.etcd.empty()) return Missing(c, "an etcd endpoint");
    client::EtcdTokenSourceOptions options;
    options.endpoint = c.etcd;
    return Upcast(client::EtcdTokenSource::Create(options));
  }
  if (c.source == "redis" || c.source == "redlock") {
    const std::vector<std::string> endpoints =
        absl::StrSplit(c.redis, ',', absl::SkipEmpty());
    if (endpoints.empty()) return Missing(c, "redis endpoints");
    if (c.source == "redis") {
      client::RedisTokenSourceOptions options;
      options.endpoint = endpoints[0];
      options.gateway = c.gateway;
      return Upcast(client::RedisTokenSource::Create(options));
    }
    client::RedlockTokenSourceOptions options;
    options.endpoints = endpoints;
    options.gateway = c.gateway;
    return Upcast(client::RedlockTokenSource::Create(options));
  }
  if (c.source == "postgres") {
    if (c.pg_dsn.empty()) return Missing(c, "a PostgreSQL DSN");
    client::PostgresTokenSourceOptions options;
    options.dsn = c.pg_dsn;
    options.gateway = c.gateway;
    return Upcast(client::PostgresTokenSource::Create(options));
  }
  if (c.source == "zookeeper") {
    if (c.zookeeper.empty()) return Missing(c, "a ZooKeeper endpoint");
    client::ZooKeeperTokenSourceOptions options;
    options.hosts = c.zookeeper;
    options.lock_path = c.zookeeper_path;
    options.gateway = c.gateway;
    return Upcast(client::ZooKeeperTokenSource::Create(options));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown token source \"", c.source,
                   "\" (lease, etcd, redis, redlock, postgres, zookeeper)"));
}

void AddSourceFlags(CLI::App& app, SourceFlags* f) {
  app.add_option("--source", f->source,
                 "lease, etcd, redis, redlock, postgres or zookeeper");
  app.add_option("--gateway", f->gateway, "gateway address (lease service)");
  app.add_option("--pg_dsn", f->pg_dsn, "PostgreSQL DSN");
  app.add_option("--etcd", f->etcd, "etcd endpoint");
  app.add_option("--redis", f->redis, "redis endpoints, comma separated");
  app.add_option("--zookeeper", f->zookeeper, "zookeeper endpoint");
}

std::vector<std::string> SourceArgs(const SourceFlags& f) {
  return {"--source=" + f.source, "--gateway=" + f.gateway,
          "--pg_dsn=" + f.pg_dsn, "--etcd=" + f.etcd,
          "--redis=" + f.redis,   "--zookeeper=" + f.zookeeper};
}

absl::StatusOr<std::unique_ptr<client::TokenSource>> MakeTokenSource(
    const SourceFlags& f, const std::string& zookeeper_path) {
  TokenSourceConfig config;
  config.source = f.source;
  config.gateway =
      grpc::CreateChannel(f.gateway, grpc::InsecureChannelCredentials());
  config.etcd = f.etcd;
  config.redis = f.redis;
  config.zookeeper = f.zookeeper;
  config.pg_dsn = f.pg_dsn;
  config.zookeeper_path = zookeeper_path;
  return MakeTokenSource(config);
}

}  // namespace fencegate::bench
