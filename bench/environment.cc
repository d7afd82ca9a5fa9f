// Copyright fencegate authors.

#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "bench/bench.h"
#include "postgres/fence_schema.h"
#include "pqxx/pqxx"
#include "tests/test_certs.h"

namespace fencegate::bench {
absl::StatusOr<std::unique_ptr<Environment>> Environment::Start(
    const EnvironmentOptions& options) {
  std::unique_ptr<Environment> env(new Environment());
  env->data_dir_ = options.work_dir + "/gateway";
  int pg_port = 0;
  if (options.pg_dsn.empty()) {
    absl::StatusOr<std::unique_ptr<testing::PostgresServer>> pg =
        testing::PostgresServer::Start(/*fsync=*/!options.pg_fast);
    if (!pg.ok()) return pg.status();
    env->pg_ = *std::move(pg);
    env->pg_dsn_ = env->pg_->Conninfo();
    // The PostgreSQL port serves a route only when its role cannot release
    // the fence its connection holds (pg-setup --revoke_session_functions).
    if (absl::StatusOr<std::vector<std::string>> revoked =
            postgres::RevokeSessionFunctions(
                env->pg_dsn_, testing::PostgresServer::kWorkerRole, {});
        !revoked.ok()) {
      return revoked.status();
    }
    env->pg_uri_ = env->pg_->Uri(absl::StrCat(
        "pool_size=", options.pg_pool_size,
        options.pg_route_params.empty() ? "" : "&", options.pg_route_params));
    pg_port = env->pg_->port();
  } else {
    env->pg_dsn_ = options.pg_dsn;
    pqxx::connection probe(options.pg_dsn);
    // The operator's own database: its fence schema is set up for the DSN's
    // user, which may well be a superuser, so the route allows it.
    if (absl::Status s = postgres::SetUpFenceSchema(
            options.pg_dsn, postgres::kDefaultFenceSchema, probe.username());
        !s.ok()) {
      return s;
    }
    env->pg_uri_ = absl::StrCat(
        "postgres://", probe.username(), "@", probe.hostname(), ":",
        probe.port(), "/", probe.dbname(), "?pool_size=", options.pg_pool_size,
        "&allow_privileged_role=true",
        options.pg_route_params.empty() ? "" : "&", options.pg_route_params);
  }
  if (!options.pgbouncer_dsn.empty()) {
    env->pgbouncer_dsn_ = options.pgbouncer_dsn;
  } else if (pg_port != 0 && std::filesystem::exists("/usr/sbin/pgbouncer")) {
    if (absl::Status s = env->StartPgbouncer(pg_port); !s.ok()) {
      std::fprintf(stderr, "bench: pgbouncer not started: %s\n",
                   std::string(s.message()).c_str());
    }
  }
  if (options.start_etcd && std::filesystem::exists("/usr/bin/etcd")) {
    absl::StatusOr<std::unique_ptr<testing::EtcdServer>> etcd =
        testing::EtcdServer::Start();
    if (etcd.ok()) {
      env->etcd_ = *std::move(etcd);
    } else {
      std::fprintf(stderr, "bench: etcd not started: %s\n",
                   std::string(etcd.status().message()).c_str());
    }
  }
  if (options.start_redis && std::filesystem::exists("/usr/bin/redis-server")) {
    for (int i = 0; i < 3; ++i) {
      absl::StatusOr<std::unique_ptr<testing::RedisServer>> redis =
          testing::RedisServer::Start();
      if (!redis.ok()) {
        std::fprintf(stderr, "bench: redis-server not started: %s\n",
                     std::string(redis.status().message()).c_str());
        env->redis_.clear();
        break;
      }
      env->redis_.push_back(*std::move(redis));
    }
  }
  if (options.start_zookeeper &&
      std::filesystem::exists("/usr/share/java/zookeeper.jar")) {
    absl::StatusOr<std::unique_ptr<testing::ZooKeeperServer>> zookeeper =
        testing::ZooKeeperServer::Start();
    if (zookeeper.ok()) {
      env->zookeeper_ = *std::move(zookeeper);
    } else {
      std::fprintf(stderr, "bench: zookeeper not started: %s\n",
                   std::string(zookeeper.status().message()).c_str());
    }
  }
  std::vector<std::string> flags = {
      "--route=db=" + env->pg_uri_,
      absl::StrCat("--route=files=file://", env->data_dir_, "/files"),
      "--route=noop=noop://", "--io_threads=64"};
  if (env->etcd_ != nullptr) {
    flags.push_back("--etcd_endpoint=" + env->etcd_->endpoint());
  }
  if (env->zookeeper_ != nullptr) {
    flags.push_back("--zookeeper_endpoint=" + env->zookeeper_->endpoint());
  }
  flags.insert(flags.end(), options.gateway_flags.begin(),
               options.gateway_flags.end());
  if (!options.start_gateway) return env;
  // Only the main gateway serves the PostgreSQL port.
  env->pgwire_port_ = testing::FreeLoopbackPort();
  std::vector<std::string> main_flags = flags;
  main_flags.push_back(
      absl::StrCat("--pg_listen=127.0.0.1:", env->pgwire_port_));
  absl::StatusOr<std::unique_ptr<testing::GatewayProcess>> gateway =
      testing::GatewayProcess::Start(env->data_dir_, main_flags);
  if (!gateway.ok()) return gateway.status();
  env->gateway_ = *std::move(gateway);
  if (options.start_mtls_gateway) {
    if (absl::Status s = env->StartMtlsGateway(options.work_dir, flags);
        !s.ok()) {
      return s;
    }
  }
  if (options.start_metrics_gateway) {
    // Metrics on, scraped by nobody during the runs: what they cost is the
    // updates on the request path.
    absl::StatusOr<std::unique_ptr<testing::GatewayProcess>> gateway =
        env->StartVariant(options.work_dir, "metrics", flags,
                          {"--metrics_listen=127.0.0.1:0"});
    if (!gateway.ok()) return gateway.status();
    env->variants_["metrics"] = *std::move(gateway);
  }
  return env;
}

std::string Environment::pgwire_dsn(const std::string& domain,
                                    uint64_t token) const {
  if (gateway_ == nullptr) return "";
  return absl::StrCat("host=127.0.0.1 port=", pgwire_port_,
                      " dbname=db user=bench options='-c fencegate.domain=",
                      domain, " -c fencegate.token=", token, "'");
}

absl::StatusOr<std::unique_ptr<testing::GatewayProcess>>
Environment::StartVariant(const std::string& work_dir,
                          const std::string& variant,
                          const std::vector<std::string>& flags,
                          const std::vector<std::string>& extra) {
  const std::string data_dir = absl::StrCat(work_dir, "/gateway-", variant);
  std::vector<std::string> variant_flags;
  for (const std::string& f : flags) {
    // Its own file route and no watchers: only `extra` differs.
    if (absl::StartsWith(f, "--route=files=") ||
        absl::StartsWith(f, "--etcd_endpoint=") ||
        absl::StartsWith(f, "--zookeeper_endpoint=")) {
      continue;
    }
    variant_flags.push_back(f);
  }
  variant_flags.push_back(
      absl::StrCat("--route=files=file://", data_dir, "/files"));
  variant_flags.insert(variant_flags.end(), extra.begin(), extra.end());
  return testing::GatewayProcess::Start(data_dir, variant_flags);
}

absl::Status Environment::StartMtlsGateway(
    const std::string& work_dir, const std::vector<std::string>& flags) {
  const std::string pki_dir = work_dir + "/pki";
  std::filesystem::create_directories(pki_dir);
  absl::StatusOr<std::unique_ptr<testing::TestPki>> pki =
      testing::TestPki::Create(pki_dir, "bench-ca");
  if (!pki.ok()) return pki.status();
  absl::StatusOr<testing::CertFiles> server = (*pki)->IssueServer("server");
  if (!server.ok()) return server.status();
  absl::StatusOr<testing::CertFiles> client =
      (*pki)->Issue("client", "bench", "URI:spiffe://fencegate.bench/client");
  if (!client.ok()) return client.status();
  // A policy in force, as on a real network: its check is part of the cost.
  const std::string policy = pki_dir + "/policy.textproto";
  std::ofstream(policy) << R"pb(
    rule {
      identities: "spiffe://fencegate.bench/*"
      domain_prefixes: ""
      resource_prefixes: ""
      permissions: [ WRITE, FENCE, GET_FENCE, LEASE ]
    }
  )pb";
  absl::StatusOr<std::unique_ptr<testing::GatewayProcess>> gateway =
      StartVariant(work_dir, "mtls", flags,
                   {"--tls_cert=" + server->cert, "--tls_key=" + server->key,
                    "--tls_client_ca=" + (*pki)->ca(), "--policy=" + policy});
  if (!gateway.ok()) return gateway.status();
  variants_["mtls"] = *std::move(gateway);
  mtls_client_ = client::TlsFiles{(*pki)->ca(), client->cert, client->key};
  return absl::OkStatus();
}

std::vector<std::string> Environment::redis_endpoints() const {
  std::vector<std::string> endpoints;
  for (const auto& r : redis_) endpoints.push_back(r->endpoint());
  return endpoints;
}

std::string Environment::variant_address(const std::string& variant) const {
  auto it = variants_.find(variant);
  return it != variants_.end() ? it->second->address() : "";
}

SourceFlags Environment::source_flags(const std::string& source,
                                      const std::string& gateway) const {
  return SourceFlags{source,
                     gateway,
                     pg_dsn_,
                     etcd_endpoint(),
                     absl::StrJoin(redis_endpoints(), ","),
                     zookeeper_endpoint()};
}

absl::Status Environment::Exec(const std::string& sql) const {
  try {
    pqxx::connection c(pg_dsn_);
    pqxx::work tx(c);
    tx.exec(sql);
    tx.commit();
  } catch (const std::exception& e) {
    return absl::UnavailableError(e.what());
  }
  return absl::OkStatus();
}

CpuMeter Environment::cpu_meter(const std::string& variant) const {
  auto it = variants_.find(variant);
  const testing::GatewayProcess* gateway =
      it != variants_.end() ? it->second.get() : gateway_.get();
  return CpuMeter(gateway->pid(), pg_ != nullptr ? pg_->postmaster_pid() : 0,
                  pgbouncer_pid_);
}

absl::Status Environment::StartPgbouncer(int pg_port) {
  char tmpl[] = "/tmp/fgbouncer-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return absl::UnavailableError("mkdtemp");
  pgbouncer_dir_ = tmpl;
  const int port = testing::FreeLoopbackPort();
  std::ofstream(pgbouncer_dir_ + "/userlist.txt") << "\"postgres\" \"\"\n";
  std::ofstream(pgbouncer_dir_ + "/pgbouncer.ini")
      << "[databases]\npostgres = host=127.0.0.1 port=" << pg_port
      << " dbname=postgres user=postgres\n"
      << "[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = " << port
      << "\nunix_socket_dir = " << pgbouncer_dir_
      << "\nauth_type = trust\nauth_file = " << pgbouncer_dir_
      << "/userlist.txt\npool_mode = transaction\nmax_client_conn = 1000\n"
      << "default_pool_size = 32\npidfile = " << pgbouncer_dir_
      << "/pgbouncer.pid\nlogfile = " << pgbouncer_dir_ << "/pgbouncer.log\n";
  std::string cmd =
      absl::StrCat("/usr/sbin/pgbouncer -d ", pgbouncer_dir_, "/pgbouncer.ini");
  if (::geteuid() == 0) {
    passwd* pw = ::getpwnam("postgres");
    if (pw == nullptr) return absl::UnavailableError("no postgres user");
    for (const auto& e : std::filesystem::directory_iterator(pgbouncer_dir_)) {
      if (::chown(e.path().c_str(), pw->pw_uid, pw->pw_gid) != 0) {
        return absl::UnavailableError("chown");
      }
    }
    if (::chown(pgbouncer_dir_.c_str(), pw->pw_uid, pw->pw_gid) != 0) {
      return absl::UnavailableError("chown");
    }
    cmd = "runuser -u postgres -- " + cmd;
  }
  if (std::system(cmd.c_str()) != 0) {
    return absl::UnavailableError("pgbouncer failed to start");
  }
  std::string dsn = absl::StrCat("host=127.0.0.1 port=", port,
                                 " user=postgres dbname=postgres");
  bool up = testing::WaitFor(
      [&] {
        try {
          pqxx::connection c(dsn);
          return true;
        } catch (const std::exception&) {
          return false;
        }
      },
      absl::Seconds(20));
  absl::StatusOr<std::string> pid =
      testing::ReadFile(pgbouncer_dir_ + "/pgbouncer.pid");
  if (pid.ok()) {
    (void)absl::SimpleAtoi(absl::StripAsciiWhitespace(*pid), &pgbouncer_pid_);
  }
  if (!up) return absl::UnavailableError("pgbouncer did not answer");
  pgbouncer_dsn_ = dsn;
  return absl::OkStatus();
}

Environment::~Environment() {
  gateway_.reset();
  if (pgbouncer_pid_ > 0 && ::kill(pgbouncer_pid_, SIGTERM) == 0) {
    // It is not our child (it daemonized): wait until it is gone, since it
    // removes its socket and pid file as it exits, and a directory removed
    // meanwhile was left half removed.
    if (!testing::WaitFor([&] { return ::kill(pgbouncer_pid_, 0) != 0; },
                          absl::Seconds(10))) {
      std::fprintf(stderr, "fencegate-bench: pgbouncer (pid %d) did not stop\n",
                   pgbouncer_pid_);
    }
  }
  if (!pgbouncer_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(pgbouncer_dir_, ec);
  }
  pg_.reset();
  etcd_.reset();
}

}  // namespace fencegate::bench
