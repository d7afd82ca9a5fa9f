// Copyright fencegate authors.
//
// fencegate: the fencing gateway server. See docs/operations.md.

#include <signal.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "gateway/config.h"
#include "gateway/flags.h"
#include "gateway/server.h"
#include "observability/log.h"
#include "observability/service_notify.h"
#include "storage_adapters/builtin.h"
#include "storage_adapters/uri.h"
#include "token_watchers/builtin.h"

namespace fencegate {
namespace {

constexpr char kUsage[] =
    "Usage: fencegate [flags]\n"
    "\n"
    "Runs the fencing gateway. With no flags it listens on 127.0.0.1:7070,\n"
    "keeps its fence store in ./fencegate-data/fence and serves the route\n"
    "\"files\" from ./fencegate-data/files. Flags override the config file.\n"
    "\n"
    "Flags:\n";

struct Flags {
  std::string config;
  std::string listen;
  std::string data_dir;
  std::vector<std::string> routes;
  uint64_t max_message_bytes = 0;
  uint64_t max_ops_per_write = 0;
  uint64_t max_connections = 0;
  uint64_t max_concurrent_streams = 0;
  uint64_t memory_limit_mib = 0;
  uint64_t max_connection_age_seconds = 0;
  uint64_t max_connection_age_grace_seconds = 0;
  uint64_t max_connection_idle_seconds = 0;
  uint64_t handshake_timeout_seconds = 0;
  uint64_t max_cached_domains = 0;
  uint64_t max_waiting_acquires = 0;
  uint64_t io_threads = 0;
  uint64_t shutdown_grace_seconds = 0;
  std::string port_file;
  bool log_writes = false;
  std::string etcd_endpoint;
  std::string etcd_lock_prefix;
  std::string etcd_tls_ca, etcd_tls_cert, etcd_tls_key;
  std::string zookeeper_endpoint;
  std::string metrics_listen;
  std::string log_format;
  std::string zookeeper_lock_path;
  std::string tls_cert, tls_key, tls_client_ca, tls_crl_dir;
  uint64_t tls_refresh_seconds = 0;
  std::string policy;
  bool insecure_allow_remote = false;
  std::string audit_log;
  bool help = false;
};

absl::Status ApplyFlags(const Flags& flags, v1::GatewayConfig* config) {
  if (!flags.listen.empty()) config->set_listen_address(flags.listen);
  if (!flags.data_dir.empty()) config->set_data_dir(flags.data_dir);
  if (!flags.etcd_endpoint.empty()) {
    config->mutable_etcd()->set_endpoint(flags.etcd_endpoint);
  }
  if (!flags.etcd_lock_prefix.empty()) {
    config->mutable_etcd()->set_lock_prefix(flags.etcd_lock_prefix);
  }
  struct StringFlag {
    const std::string& value;
    std::string* field;
  };
  for (const StringFlag& f :
       {StringFlag{flags.etcd_tls_ca, config->mutable_etcd()->mutable_tls_ca()},
        StringFlag{flags.etcd_tls_cert,
                   config->mutable_etcd()->mutable_tls_cert()},
        StringFlag{flags.etcd_tls_key,
                   config->mutable_etcd()->mutable_tls_key()},
        StringFlag{flags.metrics_listen, config->mutable_metrics_listen()},
        StringFlag{flags.log_format, config->mutable_log_format()},
        StringFlag{flags.zookeeper_endpoint,
                   config->mutable_zookeeper()->mutable_endpoint()},
        StringFlag{flags.zookeeper_lock_path,
                   config->mutable_zookeeper()->mutable_lock_path()},
        StringFlag{flags.tls_cert, config->mutable_tls()->mutable_cert()},
        StringFlag{flags.tls_key, config->mutable_tls()->mutable_key()},
        StringFlag{flags.tls_client_ca,
                   config->mutable_tls()->mutable_client_ca()},
        StringFlag{flags.tls_crl_dir, config->mutable_tls()->mutable_crl_dir()},
        StringFlag{flags.policy, config->mutable_policy()},
        StringFlag{flags.audit_log, config->mutable_audit_log()}}) {
    if (!f.value.empty()) *f.field = f.value;
  }
  if (flags.insecure_allow_remote) config->set_insecure_allow_remote(true);
  if (!flags.routes.empty()) {
    config->clear_routes();
    for (const std::string& r : flags.routes) {
      std::pair<std::string, std::string> kv =
          absl::StrSplit(r, absl::MaxSplits('=', 1));
      if (kv.second.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--route: \"", r, "\" must be NAME=URI"));
      }
      v1::Route* route = config->add_routes();
      route->set_name(kv.first);
      route->set_uri(kv.second);
    }
  }
  auto u32 = [](uint64_t v, const char* name) -> absl::StatusOr<uint32_t> {
    if (v > UINT32_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, ": too large"));
    }
    return static_cast<uint32_t>(v);
  };
  absl::StatusOr<uint32_t> v =
      u32(flags.max_message_bytes, "max_message_bytes");
  if (!v.ok()) return v.status();
  if (*v) config->mutable_limits()->set_max_message_bytes(*v);
  if (v = u32(flags.max_ops_per_write, "max_ops_per_write"); !v.ok()) {
    return v.status();
  }
  if (*v) config->mutable_limits()->set_max_ops_per_write(*v);
  struct LimitFlag {
    uint64_t value;
    const char* name;
    void (v1::Limits::*set)(uint32_t);
  };
  for (const LimitFlag& f :
       {LimitFlag{flags.max_connections, "max_connections",
                  &v1::Limits::set_max_connections},
        LimitFlag{flags.max_concurrent_streams, "max_concurrent_streams",
                  &v1::Limits::set_max_concurrent_streams},
        LimitFlag{flags.memory_limit_mib, "memory_limit_mib",
                  &v1::Limits::set_memory_limit_mib},
        LimitFlag{flags.max_connection_age_seconds,
                  "max_connection_age_seconds",
                  &v1::Limits::set_max_connection_age_seconds},
        LimitFlag{flags.max_connection_age_grace_seconds,
                  "max_connection_age_grace_seconds",
                  &v1::Limits::set_max_connection_age_grace_seconds},
        LimitFlag{flags.max_connection_idle_seconds,
                  "max_connection_idle_seconds",
                  &v1::Limits::set_max_connection_idle_seconds},
        LimitFlag{flags.handshake_timeout_seconds, "handshake_timeout_seconds",
                  &v1::Limits::set_handshake_timeout_seconds},
        LimitFlag{flags.max_cached_domains, "max_cached_domains",
                  &v1::Limits::set_max_cached_domains},
        LimitFlag{flags.max_waiting_acquires, "max_waiting_acquires",
                  &v1::Limits::set_max_waiting_acquires}}) {
    if (v = u32(f.value, f.name); !v.ok()) return v.status();
    if (*v) (config->mutable_limits()->*f.set)(*v);
  }
  if (v = u32(flags.tls_refresh_seconds, "tls_refresh_seconds"); !v.ok()) {
    return v.status();
  }
  if (*v) config->mutable_tls()->set_refresh_seconds(*v);
  if (v = u32(flags.io_threads, "io_threads"); !v.ok()) return v.status();
  if (*v) config->set_io_threads(*v);
  if (v = u32(flags.shutdown_grace_seconds, "shutdown_grace_seconds");
      !v.ok()) {
    return v.status();
  }
  if (*v) config->set_shutdown_grace_seconds(*v);
  return absl::OkStatus();
}

// Raises RLIMIT_NOFILE's soft limit to the hard limit; returns a line that
// reports both (and a warning if the result is low).
std::string RaiseFileLimit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return absl::StrCat("file descriptors: getrlimit failed: ",
                        std::strerror(errno));
  }
  const rlim_t before = limit.rlim_cur;
  if (limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) limit.rlim_cur = before;
  }
  auto str = [](rlim_t v) {
    return v == RLIM_INFINITY ? std::string("unlimited") : absl::StrCat(v);
  };
  std::string line =
      absl::StrCat("file descriptors: soft limit ", str(limit.rlim_cur),
                   limit.rlim_cur != before
                       ? absl::StrCat(" (raised from ", str(before), ")")
                       : "",
                   ", hard limit ", str(limit.rlim_max));
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < 4096) {
    absl::StrAppend(&line,
                    "; low: each client connection takes one, raise the "
                    "hard limit (LimitNOFILE=, ulimit -Hn)");
  }
  return line;
}

int Run(int argc, char** argv) {
#ifdef NDEBUG
  // Debian's Abseil is built with Mutex deadlock detection on, which puts a
  // global lock behind every Mutex acquisition -- gRPC's included. Keep it
  // in debug builds, where the tests run; in release builds it cost more
  // CPU than the whole fencing path.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  Flags flags;
  FlagSet set;
  set.String("config", &flags.config,
             "configuration file (fencegate.v1.GatewayConfig, text format)");
  set.String(
      "listen", &flags.listen,
      "host:port to serve on; port 0 picks one (default 127.0.0.1:7070)");
  set.String("data_dir", &flags.data_dir,
             "data directory (default ./fencegate-data)");
  set.StringList("route", &flags.routes,
                 "NAME=URI, repeatable; replaces the config file's routes "
                 "(default files=file://<data_dir>/files)");
  set.Uint("max_message_bytes", &flags.max_message_bytes,
           "largest request in bytes (default 16777216)");
  set.Uint("max_ops_per_write", &flags.max_ops_per_write,
           "most operations in one Write (default 1000)");
  set.Uint("max_connections", &flags.max_connections,
           "client connections open at once (default 1000)");
  set.Uint("max_concurrent_streams", &flags.max_concurrent_streams,
           "concurrent RPCs per connection (default 100)");
  set.Uint("memory_limit_mib", &flags.memory_limit_mib,
           "memory for gRPC connections and messages, MiB (default 512)");
  set.Uint("max_connection_age_seconds", &flags.max_connection_age_seconds,
           "GOAWAY a connection after this long (default 600)");
  set.Uint("max_connection_age_grace_seconds",
           &flags.max_connection_age_grace_seconds,
           "then close it after this long (default 60)");
  set.Uint("max_connection_idle_seconds", &flags.max_connection_idle_seconds,
           "close a connection idle this long (default 300)");
  set.Uint("handshake_timeout_seconds", &flags.handshake_timeout_seconds,
           "close a connection not set up within this (default 10)");
  set.Uint("max_cached_domains", &flags.max_cached_domains,
           "fences kept in memory (default 100000)");
  set.Uint("max_waiting_acquires", &flags.max_waiting_acquires,
           "Acquire calls waiting at once (default 1024)");
  set.Uint("io_threads", &flags.io_threads,
           "I/O threads (default max(4, 2 x cores))");
  set.Uint("shutdown_grace_seconds", &flags.shutdown_grace_seconds,
           "how long SIGTERM waits for in-flight requests (default 30)");
  set.String("port_file", &flags.port_file,
             "write the bound port to this file once serving");
  set.Bool("log_writes", &flags.log_writes,
           "log every accepted write, not only fence advances and errors");
  set.String(
      "etcd_endpoint", &flags.etcd_endpoint,
      "etcd host:port whose locks raise fences on handover (default off)");
  set.String("etcd_lock_prefix", &flags.etcd_lock_prefix,
             "prefix of the etcd lock keys (default fencegate/locks)");
  set.String("etcd_tls_ca", &flags.etcd_tls_ca,
             "CA bundle (PEM) of etcd's certificate: TLS to etcd");
  set.String("etcd_tls_cert", &flags.etcd_tls_cert,
             "client certificate (PEM) for an etcd with --client-cert-auth");
  set.String("etcd_tls_key", &flags.etcd_tls_key,
             "private key (PEM) of --etcd_tls_cert");
  set.String("log_format", &flags.log_format,
             "stderr log format: text (default) or json, one object a line");
  set.String("metrics_listen", &flags.metrics_listen,
             "serve GET /metrics (Prometheus) on host:port (default off)");
  set.String("zookeeper_endpoint", &flags.zookeeper_endpoint,
             "ZooKeeper host:port[,host:port...] whose locks raise fences on "
             "handover (default off)");
  set.String("zookeeper_lock_path", &flags.zookeeper_lock_path,
             "parent znode of the ZooKeeper locks (default /fencegate/locks)");
  set.String("tls_cert", &flags.tls_cert,
             "server certificate chain (PEM): serve TLS");
  set.String("tls_key", &flags.tls_key, "private key (PEM) of --tls_cert");
  set.String("tls_client_ca", &flags.tls_client_ca,
             "CA bundle (PEM) for client certificates: require them (mTLS)");
  set.String("tls_crl_dir", &flags.tls_crl_dir,
             "directory of CRLs (<issuer hash>.r<N>) for client "
             "certificates: refuse revoked ones");
  set.Uint("tls_refresh_seconds", &flags.tls_refresh_seconds,
           "how often the TLS files are re-read (default 5)");
  set.String("policy", &flags.policy,
             "access policy (fencegate.v1.Policy, text format; needs mTLS); "
             "re-read on SIGHUP");
  set.Bool("insecure_allow_remote", &flags.insecure_allow_remote,
           "serve a non-loopback address without mTLS and a policy");
  set.String("audit_log", &flags.audit_log,
             "audit log file (JSON lines); reopened on SIGHUP");
  set.Bool("help", &flags.help, "print this help");

  std::vector<std::string> positional;
  if (absl::Status s = set.Parse(argc, argv, 1, &positional); !s.ok()) {
    std::cerr << "fencegate: " << s.message() << "\n";
    return 2;
  }
  if (flags.help) {
    std::cout << kUsage << set.Usage();
    return 0;
  }
  if (!positional.empty()) {
    std::cerr << "fencegate: unexpected argument \"" << positional[0]
              << "\" (see --help)\n";
    return 2;
  }

  v1::GatewayConfig config;
  if (!flags.config.empty()) {
    absl::StatusOr<v1::GatewayConfig> loaded = LoadConfigFile(flags.config);
    if (!loaded.ok()) {
      std::cerr << "fencegate: " << loaded.status().message() << "\n";
      return 2;
    }
    config = *std::move(loaded);
  }
  if (absl::Status s = ApplyFlags(flags, &config); !s.ok()) {
    std::cerr << "fencegate: " << s.message() << "\n";
    return 2;
  }
  absl::StatusOr<GatewayOptions> options = ResolveOptions(config);
  if (!options.ok()) {
    std::cerr << "fencegate: " << options.status().message() << "\n";
    return 2;
  }
  options->log_writes = flags.log_writes;
  SetLogFormat(options->log_format);
  CaptureLibraryLogs();

  // Block the shutdown signals in every thread; main waits for them below.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // Every connection is a file descriptor, and the fence store must always
  // be able to open its next file: raise the soft limit as far as allowed.
  Log(LogSeverity::kInfo, RaiseFileLimit());
  AdapterRegistry registry;
  if (absl::Status s = RegisterBuiltinAdapters(&registry); !s.ok()) {
    std::cerr << "fencegate: " << s.message() << "\n";
    return 1;
  }
  TokenWatcherRegistry watchers;
  if (absl::Status s = RegisterBuiltinWatchers(watchers); !s.ok()) {
    std::cerr << "fencegate: " << s.message() << "\n";
    return 1;
  }
  absl::StatusOr<std::unique_ptr<GatewayServer>> server =
      GatewayServer::Start(*options, registry, watchers);
  if (!server.ok()) {
    std::cerr << "fencegate: " << server.status().message() << "\n";
    return absl::IsInvalidArgument(server.status()) ? 2 : 1;
  }
  std::string host =
      options->listen_address.substr(0, options->listen_address.rfind(':'));
  Log(LogSeverity::kInfo,
      absl::StrCat("fencegate serving on ", host, ":", (*server)->port(),
                   " data_dir=", options->data_dir));
  for (const TokenWatcherSpec& watcher : options->watchers) {
    Log(LogSeverity::kInfo,
        absl::StrCat("following ", watcher.kind, " locks",
                     watcher.lock_path.empty() ? "" : " under ",
                     watcher.lock_path, " at ", watcher.endpoint));
  }
  for (const RouteSpec& route : options->routes) {
    Log(LogSeverity::kInfo,
        absl::StrCat("route ", route.name, "/ -> ", RedactUri(route.uri),
                     route.statements.empty()
                         ? ""
                         : absl::StrCat(" (", route.statements.size(),
                                        " named statements)")));
  }
  Log(LogSeverity::kInfo,
      !options->tls.enabled() ? "transport: plaintext"
      : options->tls.client_ca.empty()
          ? "transport: TLS (no client certificates)"
          : "transport: mTLS (client certificates required)");
  if (options->policy_path.empty()) {
    Log(LogSeverity::kWarning,
        "no --policy: every caller may do everything (for loopback "
        "development)");
  }
  if (options->insecure_allow_remote &&
      !IsLoopbackAddress(options->listen_address) &&
      (options->policy_path.empty() || options->tls.client_ca.empty())) {
    Log(LogSeverity::kWarning,
        "--insecure_allow_remote: serving a non-loopback address to "
        "callers that are neither authenticated nor authorized");
  }
  if ((*server)->metrics_port() != 0) {
    Log(LogSeverity::kInfo,
        absl::StrCat("metrics on http://",
                     options->metrics_listen.substr(
                         0, options->metrics_listen.rfind(':')),
                     ":", (*server)->metrics_port(), "/metrics"));
  }
  if (!flags.port_file.empty()) {
    // Written to a temporary name and renamed, so readers never see half.
    std::string tmp = flags.port_file + ".tmp";
    {
      std::ofstream out(tmp);
      out << (*server)->port() << "\n";
    }
    if (std::rename(tmp.c_str(), flags.port_file.c_str()) != 0) {
      Log(LogSeverity::kError, "cannot write --port_file " + flags.port_file);
      return 1;
    }
  }

  // Serving: fences loaded and recovered, watchers started, routes
  // checked, the port bound (and written to --port_file).
  const std::string serving =
      absl::StrCat("serving on ", host, ":", (*server)->port());
  auto notified = [](const absl::Status& s) {
    if (!s.ok()) Log(LogSeverity::kWarning, std::string(s.message()));
  };
  notified(ServiceNotify::Ready(serving));
  int sig = 0;
  for (;;) {
    sigwait(&signals, &sig);
    if (sig != SIGHUP) break;
    Log(LogSeverity::kInfo,
        "SIGHUP: reloading the policy, reopening the audit log");
    notified(ServiceNotify::Reloading());
    (*server)->Reload();
    notified(ServiceNotify::Ready(serving));
  }
  Log(LogSeverity::kInfo,
      absl::StrCat("signal ", sig,
                   ": refusing new requests, finishing in-flight ones"));
  notified(ServiceNotify::Stopping(
      absl::StrCat("signal ", sig, ": finishing in-flight requests")));
  (*server)->Shutdown(options->shutdown_grace);
  Log(LogSeverity::kInfo, "stopped");
  return 0;
}

}  // namespace
}  // namespace fencegate

int main(int argc, char** argv) {
  const int rc = fencegate::Run(argc, argv);
  fencegate::FlushLog();  // Lines still queued for stderr.
  return rc;
}
