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
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "fencegate/common/flag_args.h"
#include "fencegate/common/host_port.h"
#include "fencegate/common/uri.h"
#include "gateway/config.h"
#include "gateway/server.h"
#include "gateway/setting_flags.h"
#include "observability/log.h"
#include "observability/service_notify.h"
#include "storage_adapters/builtin.h"
#include "token_watchers/builtin.h"

namespace fencegate {
namespace {

constexpr char kDescription[] =
    "Runs the fencing gateway. With no flags it listens on 127.0.0.1:7070,\n"
    "keeps its fence store in ./fencegate-data/fence and serves the route\n"
    "\"files\" from ./fencegate-data/files. Flags override the config file;\n"
    "'-' and '_' are one in flag names. docs/operations.md describes each.";

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
  std::string config_path;
  std::string port_file;
  CLI::App app(kDescription, "fencegate");
  app.add_option("--config", config_path,
                 "configuration file (fencegate.v1.GatewayConfig, text "
                 "format); the flags below override it")
      ->type_name("PATH");
  app.add_option("--port_file", port_file,
                 "write the bound port to this file once serving")
      ->type_name("PATH");
  SettingFlags settings(app);
  if (std::optional<int> exit = ParseFlags(app, argc, argv)) return *exit;

  v1::GatewayConfig config;
  if (!config_path.empty()) {
    absl::StatusOr<v1::GatewayConfig> loaded = LoadConfigFile(config_path);
    if (!loaded.ok()) {
      std::cerr << "fencegate: " << loaded.status().message() << "\n";
      return 2;
    }
    config = *std::move(loaded);
  }
  if (absl::Status s = settings.Apply(&config); !s.ok()) {
    std::cerr << "fencegate: " << s.message() << "\n";
    return 2;
  }
  absl::StatusOr<GatewayOptions> options = ResolveOptions(config);
  if (!options.ok()) {
    std::cerr << "fencegate: " << options.status().message() << "\n";
    return 2;
  }
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
  const absl::string_view host = HostOf(options->listen_address);
  Log(LogSeverity::kInfo,
      absl::StrCat("fencegate serving on ", host, ":", (*server)->port(),
                   " data_dir=", options->data_dir));
  if ((*server)->pg_port() != 0) {
    Log(LogSeverity::kInfo,
        absl::StrCat("PostgreSQL port serving on ", HostOf(options->pg_listen),
                     ":", (*server)->pg_port()));
  }
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
        absl::StrCat("metrics on http://", HostOf(options->metrics_listen), ":",
                     (*server)->metrics_port(), "/metrics"));
  }
  if (!port_file.empty()) {
    // Written to a temporary name and renamed, so readers never see half.
    std::string tmp = port_file + ".tmp";
    {
      std::ofstream out(tmp);
      out << (*server)->port() << "\n";
    }
    if (std::rename(tmp.c_str(), port_file.c_str()) != 0) {
      Log(LogSeverity::kError, "cannot write --port_file " + port_file);
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
  int rc = 1;
  try {
    rc = fencegate::Run(argc, argv);
  } catch (const std::exception& e) {
    // A flag declared twice in the schema (SettingsTest keeps that out) or
    // memory exhausted.
    std::cerr << "fencegate: " << e.what() << "\n";
  }
  fencegate::FlushLog();  // Lines still queued for stderr.
  return rc;
}
