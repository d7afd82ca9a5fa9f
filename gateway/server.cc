// Copyright fencegate authors.

#include "gateway/server.h"

#include <sys/resource.h>

#include <algorithm>
#include <climits>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "fencegate/common/host_port.h"
#include "fencegate/common/stale_token.h"
#include "fencegate/common/thread_name.h"
#include "fencegate/common/uri.h"
#include "fencing/clock.h"
#include "fencing/rocksdb_fence_store.h"
#include "grpcpp/ext/health_check_service_server_builder_option.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "observability/log.h"
#include "postgres/classifier_gauges.h"
#include "postgres/route_options.h"
#include "security/server_tls.h"

namespace fencegate {
namespace {

// Threads of the Fence and Sequence calls' raises: as many as a PostgreSQL
// route's fence-table connections (postgres_adapter.h).
constexpr size_t kRaiseThreads = 16;

// How often each route's storage is probed for its health ("route/<name>").
constexpr absl::Duration kRouteHealthInterval = absl::Seconds(2);

// Whether gRPC listens on a unix socket for `listen_address`.
bool IsUnixAddress(absl::string_view listen_address) {
  return absl::StartsWith(listen_address, "unix:") ||
         absl::StartsWith(listen_address, "unix-abstract:");
}

// The TCP port in `listen_address` ("host:port"); 0 for port 0, a unix
// socket or an address that does not parse (gRPC reports the last).
int ConfiguredPort(absl::string_view listen_address) {
  if (IsUnixAddress(listen_address)) return 0;
  absl::StatusOr<HostPort> parsed =
      ParseHostPort(listen_address, "listen_address");
  return parsed.ok() ? parsed->port : 0;
}

// Caps the connections on `port`; warns when the descriptor limit would
// stop new connections first.
absl::StatusOr<std::unique_ptr<ConnectionLimit>> LimitConnections(
    int port, uint32_t max, const MetricsContext& metrics) {
  // Half of the slots at most for connections that have made no RPC yet,
  // when the limit is reached (connection_limit.h).
  absl::StatusOr<std::unique_ptr<ConnectionLimit>> limit =
      ConnectionLimit::Install(port, max, metrics, absl::Milliseconds(100),
                               std::max<uint32_t>(1, max / 2));
  if (!limit.ok()) return limit.status();
  rlimit files{};
  // Descriptors the gateway needs besides its clients': the fence store's
  // files and reserve, PostgreSQL connections, logs (a generous guess).
  constexpr rlim_t kOwnUse = 256;
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 &&
      files.rlim_cur != RLIM_INFINITY && files.rlim_cur < max + kOwnUse) {
    Log(LogSeverity::kWarning,
        absl::StrCat("max_connections ", max,
                     " is above what the file "
                     "descriptor limit (",
                     files.rlim_cur,
                     ") leaves for clients: past it, new connections are "
                     "closed at accept for want of descriptors"));
  }
  Log(LogSeverity::kInfo,
      absl::StrCat("at most ", max, " client connections on port ", port,
                   " (max_connections)"));
  return limit;
}

}  // namespace

void GatewayServer::RaiseFenceForHolder(absl::string_view kind,
                                        const std::string& domain,
                                        uint64_t token) const {
  absl::StatusOr<FenceDecision> d = fencer_->Fence(domain, token);
  if (d.ok()) {
    if (d->advanced) {
      gate_->AuditInternalAdvance(absl::StrCat(kind, "-watcher"), domain,
                                  token);
      Log(LogSeverity::kInfo,
          absl::StrFormat("%s lock handover: fence of \"%s\" raised to %d",
                          kind, absl::CHexEscape(domain), token));
    }
  } else if (GetStaleToken(d.status()).has_value()) {
    // The fence is already higher (another source raised it): nothing to do.
  } else {
    Log(LogSeverity::kError,
        absl::StrCat(kind, " watcher: raising fence of \"",
                     absl::CHexEscape(domain), "\": ", d.status().ToString()));
  }
}

absl::StatusOr<std::unique_ptr<GatewayServer>> GatewayServer::Start(
    const GatewayOptions& options, const AdapterRegistry& adapters,
    const TokenWatcherRegistry& watchers) {
  if (options.io_threads == 0 || options.queue_threads == 0 ||
      options.max_message_bytes == 0 || options.listen_address.empty()) {
    return absl::InvalidArgumentError(
        "gateway options left unset: build them with ResolveOptions");
  }
  std::unique_ptr<GatewayServer> s(new GatewayServer());
  MetricsContext metrics;
  if (!options.metrics_listen.empty()) {
    absl::StatusOr<std::unique_ptr<MetricsServer>> served =
        MetricsServer::Start(options.metrics_listen);
    if (!served.ok()) return served.status();
    s->metrics_ = *std::move(served);
    metrics = s->metrics_->context();
  }
  std::vector<std::string> route_names;
  for (const RouteSpec& route : options.routes) {
    route_names.push_back(route.name);
  }
  s->request_metrics_ = std::make_unique<RequestMetrics>(metrics, route_names);
  s->sql_classifier_ = std::make_unique<postgres::SqlClassifier>(
      postgres::SqlClassifier::Options{});
  if (metrics.enabled()) {
    s->sql_classifier_gauges_ = postgres::AddClassifierGauges(
        *s->sql_classifier_, *metrics.scrape_gauges, {});
  }
  absl::StatusOr<std::unique_ptr<Router>> router = Router::Create(
      adapters, options.routes, metrics,
      [](const std::string& message) { Log(LogSeverity::kWarning, message); },
      s->sql_classifier_.get());
  if (!router.ok()) return router.status();
  s->router_ = *std::move(router);
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      ServerCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  s->policy_path_ = options.policy_path;
  for (const TokenWatcherSpec& spec : options.watchers) {
    s->policy_env_.watched.insert(spec.kind);
  }
  for (const RouteSpec& route : options.routes) {
    for (const NamedStatementSpec& statement : route.statements) {
      s->policy_env_.statement_names.insert(statement.name);
    }
  }
  std::shared_ptr<const Policy> policy;
  if (!s->policy_path_.empty()) {
    absl::StatusOr<std::shared_ptr<const Policy>> loaded = s->LoadPolicy();
    if (!loaded.ok()) return loaded.status();
    policy = *std::move(loaded);
  }
  if (!options.audit_log_path.empty()) {
    absl::StatusOr<std::unique_ptr<AuditLog>> audit =
        AuditLog::Open(options.audit_log_path);
    if (!audit.ok()) return audit.status();
    s->audit_ = *std::move(audit);
  }
  absl::StatusOr<std::vector<std::string>> checked =
      s->router_->CheckAtStartup();
  if (!checked.ok()) return checked.status();
  for (const std::string& line : *checked) Log(LogSeverity::kInfo, line);

  RocksDbFenceStoreOptions store_options;
  store_options.path = absl::StrCat(options.data_dir, "/fence");
  store_options.max_cached_domains = options.max_cached_domains;
  store_options.metrics = metrics;
  absl::StatusOr<std::unique_ptr<RocksDbStore>> store =
      OpenRocksDbStore(store_options);
  if (!store.ok()) return store.status();
  s->store_ = *std::move(store);
  // Before serving: this gateway's fences at least as high as what its
  // routes' storage holds (a fence store lost or restored from a copy).
  s->route_fences_ = std::make_unique<RouteFences>(*s->router_);
  absl::StatusOr<std::vector<RouteFences::Line>> recovered =
      s->route_fences_->Recover(*s->store_, *Clock::Real());
  if (!recovered.ok()) return recovered.status();
  for (const RouteFences::Line& line : *recovered) {
    Log(line.warning ? LogSeverity::kWarning : LogSeverity::kInfo, line.text);
  }
  s->pool_ = std::make_unique<IoPool>(options.io_threads, "fg-io");
  // As many as a PostgreSQL route has fence-table connections
  // (postgres_adapter.h): raises beyond that many waiting at once queue.
  s->raise_pool_ = std::make_unique<IoPool>(kRaiseThreads, "fg-raise");
  // Work whose domain's turn came runs on the I/O pool.
  s->fencer_ = std::make_unique<Fencer>(
      s->store_.get(), Clock::Real(),
      s->route_fences_->empty() ? nullptr : s->route_fences_.get(),
      [pool = s->pool_.get()](absl::AnyInvocable<void() &&> work) {
        pool->Post(std::move(work));
      });
  LeaseManagerOptions lease_options;
  lease_options.max_waiters = options.max_waiting_acquires;
  lease_options.metrics = metrics;
  absl::StatusOr<std::unique_ptr<LeaseManager>> leases = LeaseManager::Create(
      s->store_.get(), s->fencer_.get(), Clock::Real(), lease_options);
  if (!leases.ok()) return leases.status();
  s->leases_ = *std::move(leases);
  // Counted once before serving: a gateway that shares its storage with
  // others serves no LEASE-bound domain (fleet_watch.h).
  s->fleet_watch_ = std::make_unique<FleetWatch>(s->router_->Adapters(),
                                                 kRouteHealthInterval);
  s->fleet_watch_->Start();
  RequestGateOptions gate_options;
  gate_options.audit = s->audit_.get();
  gate_options.lease_servable = [fleet = s->fleet_watch_.get()] {
    return fleet->LeaseServable();
  };
  // Watchers are built first (the gate asks them about tokens) and started
  // once the gate exists (their reports are audited through it).
  for (const TokenWatcherSpec& spec : options.watchers) {
    TokenWatcherContext context;
    const std::string kind = spec.kind;
    context.on_holder = [server = s.get(), kind](const std::string& domain,
                                                 uint64_t token) {
      server->RaiseFenceForHolder(kind, domain, token);
    };
    context.metrics = metrics;
    context.on_error = [kind](const absl::Status& error) {
      Log(LogSeverity::kWarning,
          absl::StrCat(kind, " watcher: ", error.ToString()));
    };
    absl::StatusOr<std::unique_ptr<TokenWatcher>> watcher =
        watchers.Create(spec, std::move(context));
    if (!watcher.ok()) return watcher.status();
    if (!gate_options.watchers.try_emplace(kind, watcher->get()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("two ", kind, " watchers: at most one per kind"));
    }
    s->watchers_.push_back(*std::move(watcher));
  }
  s->gate_ = std::make_unique<RequestGate>(std::move(gate_options));
  for (const std::unique_ptr<TokenWatcher>& watcher : s->watchers_) {
    if (absl::Status st = watcher->Start(); !st.ok()) {
      return absl::Status(
          st.code(), absl::StrCat(watcher->kind(), " watcher: ", st.message()));
    }
  }
  s->gate_->SetPolicy(std::move(policy));
  // Half of the quota for requests the gateway holds, the other half for
  // gRPC's transport.
  s->memory_ = std::make_unique<MemoryBudget>(
      static_cast<size_t>(options.memory_limit_bytes / 2));
  s->service_ = std::make_unique<GatewayService>(
      s->fencer_.get(), s->router_.get(), s->pool_.get(), s->raise_pool_.get(),
      s->gate_.get(),
      GatewayServiceOptions{options.max_ops_per_write, options.log_writes,
                            s->request_metrics_.get(), s->memory_.get()});

  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // The health service is the gateway's own, on its queues (gRPC's default
  // one would bring the callback API's polling threads).
  builder.SetOption(
      std::make_unique<grpc::HealthCheckServiceServerBuilderOption>(nullptr));
  s->health_ = std::make_unique<HealthService>();
  builder.RegisterService(s->health_->grpc_service());
  builder.AddListeningPort(options.listen_address, *credentials, &s->port_);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  // Bounded resources: no client can hold memory, streams or connections
  // for ever (docs/operations.md, "Limits").
  grpc::ResourceQuota quota("fencegate");
  quota.Resize(static_cast<size_t>(options.memory_limit_bytes));
  builder.SetResourceQuota(quota);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             static_cast<int>(options.max_concurrent_streams));
  auto ms = [](absl::Duration d) {
    return static_cast<int>(
        std::min<int64_t>(absl::ToInt64Milliseconds(d), INT_MAX));
  };
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS,
                             ms(options.max_connection_age));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                             ms(options.max_connection_age_grace));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                             ms(options.max_connection_idle));
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             ms(options.handshake_timeout));
  s->lease_service_ = std::make_unique<LeaseService>(
      s->leases_.get(), s->pool_.get(), s->gate_.get());
  builder.RegisterService(s->service_->grpc_service());
  builder.RegisterService(s->lease_service_->grpc_service());
  // The services' calls are served on queues of the gateway's own;
  // reflection (synchronous in gRPC 1.51) on a polling thread of gRPC's.
  s->queues_ =
      std::make_unique<CompletionQueues>(&builder, options.queue_threads);
  // Every RPC proves its connection to the connection limit.
  auto proof = std::make_unique<ProofOfCallInterceptors>();
  ProofOfCallInterceptors* proof_of_call = proof.get();  // The server's.
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(std::move(proof));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  // Installed before the listener opens when the port is known, so that no
  // connection goes uncounted.
  const bool tcp = !IsUnixAddress(options.listen_address);
  if (const int port = ConfiguredPort(options.listen_address); port > 0) {
    absl::StatusOr<std::unique_ptr<ConnectionLimit>> limit =
        LimitConnections(port, options.max_connections, metrics);
    if (!limit.ok()) return limit.status();
    s->connection_limit_ = *std::move(limit);
  }
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ",
                                               options.listen_address,
                                               " (address in use or invalid)"));
  }
  for (size_t i = 0; i < s->queues_->size(); ++i) {
    s->service_->Listen(s->queues_->queue(i));
    s->lease_service_->Listen(s->queues_->queue(i));
    s->health_->Listen(s->queues_->queue(i));
  }
  s->queues_->Start();
  if (tcp && s->connection_limit_ == nullptr) {
    absl::StatusOr<std::unique_ptr<ConnectionLimit>> limit =
        LimitConnections(s->port_, options.max_connections, metrics);
    if (!limit.ok()) return limit.status();
    s->connection_limit_ = *std::move(limit);
  }
  if (s->connection_limit_ != nullptr) {
    proof_of_call->Attach(s->connection_limit_.get());
  }
  HealthService* health = s->health_.get();
  health->SetServingStatus(true);
  health->SetServingStatus("fencegate.v1.Gateway", true);
  health->SetServingStatus("fencegate.v1.Lease", true);
  s->route_health_ = std::make_unique<RouteHealth>(
      s->router_->Adapters(), health, kRouteHealthInterval);
  s->route_health_->Start();
  if (!options.pg_listen.empty()) {
    if (absl::Status st = s->StartPgPort(options); !st.ok()) return st;
  }
  return s;
}

absl::Status GatewayServer::StartPgPort(const GatewayOptions& options) {
  PgPortOptions port;
  port.listen_address = options.pg_listen;
  port.max_connections = options.pg_max_connections;
  port.max_message_bytes = options.max_message_bytes;
  port.idle_transaction_timeout = options.pg_idle_transaction_timeout;
  port.startup_timeout = options.handshake_timeout;
  port.tls = options.tls;
  port.require_client_certificate = !options.policy_path.empty();
  if (!options.pg_user_file.empty()) {
    absl::StatusOr<UserFile> users = UserFile::Load(options.pg_user_file);
    if (!users.ok()) return users.status();
    port.users = std::make_shared<const UserFile>(*std::move(users));
  }
  for (const RouteSpec& route : options.routes) {
    // As the router parsed it: the scheme in lower case, whatever its case
    // in the configuration.
    const Uri* uri = router_->UriOf(route.name);
    if (uri == nullptr ||
        (uri->scheme != "postgres" && uri->scheme != "postgresql")) {
      continue;
    }
    absl::StatusOr<postgres::RouteOptions> parsed = postgres::ParseRouteUri(
        *uri, dynamic_cast<const v1::PostgresRoute*>(route.settings.get()));
    if (!parsed.ok()) return parsed.status();
    port.routes.push_back(PgPortRoute{route.name, *std::move(parsed)});
  }
  if (port.routes.empty()) {
    return absl::InvalidArgumentError(
        "pg.listen: the PostgreSQL port needs a PostgreSQL route "
        "(--route=NAME=postgres://...)");
  }
  PgPortContext context;
  context.fencer = fencer_.get();
  context.run_blocking = [pool =
                              pool_.get()](absl::AnyInvocable<void() &&> work) {
    pool->Post(std::move(work));
  };
  context.gate = gate_.get();
  context.memory = memory_.get();
  context.classifier = sql_classifier_.get();
  absl::StatusOr<std::unique_ptr<PgPort>> started =
      PgPort::Start(std::move(port), std::move(context));
  if (!started.ok()) return started.status();
  pg_port_ = *std::move(started);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const Policy>> GatewayServer::LoadPolicy()
    const {
  absl::StatusOr<std::shared_ptr<const Policy>> policy =
      Policy::Load(policy_path_, policy_env_);
  if (policy.ok()) {
    Log(LogSeverity::kInfo,
        absl::StrCat("policy \"", policy_path_,
                     "\" in force: ", (*policy)->rule_count(), " rules"));
  }
  return policy;
}

void GatewayServer::Reload() {
  if (!policy_path_.empty()) {
    absl::StatusOr<std::shared_ptr<const Policy>> policy = LoadPolicy();
    if (policy.ok()) {
      gate_->SetPolicy(*std::move(policy));
    } else {
      Log(LogSeverity::kError,
          absl::StrCat("policy not reloaded, the previous one stays in force: ",
                       policy.status().message()));
    }
  }
  if (audit_ != nullptr) {
    if (absl::Status s = audit_->Reopen(); !s.ok()) {
      Log(LogSeverity::kError, s.message());
    }
  }
}

GatewayServer::~GatewayServer() {
  if (!shut_down_) Shutdown(absl::ZeroDuration());
}

void GatewayServer::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
  // Its sessions end now; their servers roll back open transactions.
  if (pg_port_ != nullptr) pg_port_->Shutdown();
  if (server_ != nullptr) {
    // NOT_SERVING, and the Watch calls end.
    health_->Shutdown();
    // Waiting Acquire calls end now rather than hold shutdown up.
    if (leases_ != nullptr) leases_->Shutdown();
    // New calls are refused; in-flight ones run to completion; after the
    // deadline gRPC cancels them, which the client sees even if the write
    // still lands. The gateway waits for every call to be freed even then
    // (WaitForCalls below), so when the grace is over the storage work still
    // running (a statement that ignores its timeout, say) is cancelled from
    // another thread rather than waited for.
    const absl::Time deadline = absl::Now() + grace;
    absl::Notification finished;
    std::thread canceller([this, deadline, &finished] {
      NameThisThread("fg-shutdown");
      if (!finished.WaitForNotificationWithDeadline(deadline) &&
          router_ != nullptr) {
        Log(LogSeverity::kWarning,
            "shutdown grace over: cancelling storage work still running");
        router_->CancelInFlight();
      }
    });
    server_->Shutdown(absl::ToChronoTime(deadline));
    // gRPC waits for no call on a completion queue: the calls still
    // running are waited for here, the canceller ending their storage work
    // once the grace is over.
    queues_->WaitForCalls();
    finished.Notify();
    canceller.join();
  }
  // Every call is freed: the queues can go.
  if (queues_ != nullptr) queues_->Stop();
  // After the in-flight requests, which may still ask a watcher about a
  // token, and whose handovers the watchers keep fencing meanwhile.
  if (route_health_ != nullptr) route_health_->Stop();
  if (fleet_watch_ != nullptr) fleet_watch_->Stop();
  for (const std::unique_ptr<TokenWatcher>& watcher : watchers_) {
    watcher->Stop();
  }
  if (raise_pool_ != nullptr) raise_pool_->Join();
  if (pool_ != nullptr) pool_->Join();
  if (audit_ != nullptr) audit_->Flush();
}

}  // namespace fencegate
