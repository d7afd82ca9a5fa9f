// Copyright fencegate authors.

#include "gateway/config.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "fencegate/common/host_port.h"
#include "fencegate/common/text_proto.h"
#include "fencegate/common/uri.h"
#include "gateway/settings.h"

namespace fencegate {
namespace {

absl::Status MakeDirs(const std::string& path) {
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos == path.size() || path[pos] == '/') {
      std::string prefix = path.substr(0, pos);
      if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
        return absl::InvalidArgumentError(absl::StrCat(
            "data_dir: cannot create \"", prefix, "\": ", strerror(errno)));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::GatewayConfig> LoadConfigFile(const std::string& path) {
  v1::GatewayConfig config;
  if (absl::Status s = LoadTextProtoFile(path, "config file", &config);
      !s.ok()) {
    return s;
  }
  return config;
}

absl::StatusOr<GatewayOptions> ResolveOptions(const v1::GatewayConfig& given) {
  if (given.etcd().endpoint().empty() && given.etcd().ByteSizeLong() != 0) {
    return absl::InvalidArgumentError(
        "etcd: lock_prefix and TLS files need an endpoint");
  }
  if (given.zookeeper().endpoint().empty() &&
      given.zookeeper().ByteSizeLong() != 0) {
    return absl::InvalidArgumentError("zookeeper: lock_path needs an endpoint");
  }
  // Every zero setting takes the schema's default (config.proto).
  v1::GatewayConfig config = given;
  if (absl::Status s = FillSettingDefaults(&config); !s.ok()) return s;
  GatewayOptions options;
  options.listen_address = config.listen_address();
  if (!absl::StartsWith(options.listen_address, "unix:")) {
    if (absl::StatusOr<HostPort> parsed =
            ParseHostPort(options.listen_address, "listen_address:");
        !parsed.ok()) {
      return parsed.status();
    }
  }
  const std::string& data_dir = config.data_dir();
  if (absl::Status s = MakeDirs(data_dir); !s.ok()) return s;
  char resolved[PATH_MAX];
  if (::realpath(data_dir.c_str(), resolved) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data_dir: cannot resolve \"", data_dir, "\": ", strerror(errno)));
  }
  options.data_dir = resolved;

  for (const v1::Route& route : config.routes()) {
    RouteSpec spec{route.name(), route.uri(), {}, nullptr};
    if (route.has_postgres()) {
      spec.settings = std::make_shared<v1::PostgresRoute>(route.postgres());
    }
    for (const v1::NamedStatement& st : route.statements()) {
      spec.statements.push_back({st.name(), st.sql(), st.session_safe()});
    }
    options.routes.push_back(std::move(spec));
  }
  if (options.routes.empty()) {
    options.routes.push_back(
        {"files",
         absl::StrCat("file://", options.data_dir, "/files"),
         {},
         nullptr});
  }
  const std::filesystem::path fence_dir =
      std::filesystem::path(options.data_dir) / "fence";
  for (const RouteSpec& route : options.routes) {
    // A bad URI is the router's to report; the scheme in any case.
    absl::StatusOr<Uri> uri = ParseUri(route.uri);
    if (!uri.ok() || uri->scheme != "file") continue;
    std::error_code ec;
    std::filesystem::path root = std::filesystem::weakly_canonical(
        std::filesystem::path(uri->path), ec);  // The adapter's root.
    if (ec) continue;  // The adapter reports unusable roots itself.
    auto within = [](const std::filesystem::path& inner,
                     const std::filesystem::path& outer) {
      auto [o, i] =
          std::mismatch(outer.begin(), outer.end(), inner.begin(), inner.end());
      return o == outer.end();
    };
    if (within(fence_dir, root) || within(root, fence_dir)) {
      return absl::InvalidArgumentError(
          absl::StrCat("route \"", route.name, "\": its root ", root.string(),
                       " overlaps the fence store ", fence_dir.string(),
                       "; clients could overwrite fence state"));
    }
  }

  const v1::Limits& limits = config.limits();
  if (limits.max_message_bytes() < 1024 ||
      limits.max_message_bytes() > INT_MAX) {
    return absl::InvalidArgumentError(
        "limits.max_message_bytes: must be from 1024 to 2147483647");
  }
  options.max_message_bytes = limits.max_message_bytes();
  options.max_ops_per_write = limits.max_ops_per_write();
  options.max_connections = limits.max_connections();
  options.max_concurrent_streams = limits.max_concurrent_streams();
  if (limits.memory_limit_mib() < 64) {
    return absl::InvalidArgumentError("limits.memory_limit_mib: at least 64");
  }
  options.memory_limit_bytes = uint64_t{limits.memory_limit_mib()} << 20;
  options.max_connection_age =
      absl::Seconds(limits.max_connection_age_seconds());
  options.max_connection_age_grace =
      absl::Seconds(limits.max_connection_age_grace_seconds());
  options.max_connection_idle =
      absl::Seconds(limits.max_connection_idle_seconds());
  options.handshake_timeout = absl::Seconds(limits.handshake_timeout_seconds());
  options.max_cached_domains = limits.max_cached_domains();
  options.max_waiting_acquires = limits.max_waiting_acquires();
  options.io_threads = config.io_threads();
  if (options.io_threads == 0) {
    options.io_threads =
        std::max(4u, 2 * std::max(1u, std::thread::hardware_concurrency()));
  }
  if (options.io_threads > 1024) {
    return absl::InvalidArgumentError("io_threads: at most 1024");
  }
  options.queue_threads = config.queue_threads();
  if (options.queue_threads == 0) {
    // One thread serves what it reads without a hand-over (gRPC 1.51's
    // poller lets any waiting queue thread read any connection, and wakes
    // the connection's own): more pay only once one is saturated
    // (docs/benchmarks.md, "The gRPC API on completion queues").
    options.queue_threads =
        std::max(1u, std::thread::hardware_concurrency() / 4);
  }
  if (options.queue_threads > 256) {
    return absl::InvalidArgumentError("queue_threads: at most 256");
  }
  if (!config.etcd().endpoint().empty()) {
    TokenWatcherSpec etcd;
    etcd.kind = "etcd";
    etcd.endpoint = config.etcd().endpoint();
    etcd.lock_path = config.etcd().lock_prefix();
    etcd.tls =
        client::TlsFiles{config.etcd().tls_ca(), config.etcd().tls_cert(),
                         config.etcd().tls_key()};
    options.watchers.push_back(std::move(etcd));
  }
  if (!config.zookeeper().endpoint().empty()) {
    TokenWatcherSpec zookeeper;
    zookeeper.kind = "zookeeper";
    zookeeper.endpoint = config.zookeeper().endpoint();
    zookeeper.lock_path = config.zookeeper().lock_path();
    options.watchers.push_back(std::move(zookeeper));
  }
  options.shutdown_grace = absl::Seconds(config.shutdown_grace_seconds());
  options.tls.cert = config.tls().cert();
  options.tls.key = config.tls().key();
  options.tls.client_ca = config.tls().client_ca();
  options.tls.crl_dir = config.tls().crl_dir();
  options.tls.refresh = absl::Seconds(config.tls().refresh_seconds());
  options.metrics_listen = config.metrics_listen();
  if (config.log_format() == "json") {
    options.log_format = LogFormat::kJson;
  } else if (config.log_format() != "text") {
    return absl::InvalidArgumentError(absl::StrCat(
        "log_format: \"", config.log_format(), "\" is neither text nor json"));
  }
  options.log_writes = config.log_writes();
  options.policy_path = config.policy();
  options.insecure_allow_remote = config.insecure_allow_remote();
  options.audit_log_path = config.audit_log();
  options.pg_listen = config.pg().listen();
  options.pg_user_file = config.pg().user_file();
  options.pg_max_connections = config.pg().max_connections();
  options.pg_idle_transaction_timeout =
      absl::Milliseconds(config.pg().idle_transaction_timeout_ms());
  if (options.pg_listen.empty() && !options.pg_user_file.empty()) {
    return absl::InvalidArgumentError("pg.user_file: needs pg.listen");
  }
  if (!options.pg_listen.empty()) {
    if (options.pg_max_connections == 0) {
      return absl::InvalidArgumentError("pg.max_connections: at least 1");
    }
    if (!IsLoopbackAddress(options.pg_listen) && options.pg_user_file.empty() &&
        options.tls.client_ca.empty() && !options.insecure_allow_remote) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pg.listen: \"", options.pg_listen,
          "\" is reachable from other machines; serving it needs a "
          "--pg_user_file or client certificates (--tls_client_ca), or "
          "--insecure_allow_remote"));
    }
  }
  const bool mtls = options.tls.enabled() && !options.tls.client_ca.empty();
  if (!options.policy_path.empty() && !mtls) {
    return absl::InvalidArgumentError(
        "policy: needs mTLS (tls.cert, tls.key and tls.client_ca): a policy "
        "grants client identities, which only client certificates prove");
  }
  if (!IsLoopbackAddress(options.listen_address) &&
      !options.insecure_allow_remote &&
      (!mtls || options.policy_path.empty())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "listen_address: \"", options.listen_address,
        "\" is reachable from other machines; serving it needs mTLS "
        "(--tls_cert, --tls_key, --tls_client_ca) and a --policy, or "
        "--insecure_allow_remote to serve it without them"));
  }
  return options;
}

bool IsLoopbackAddress(absl::string_view listen_address) {
  if (absl::StartsWith(listen_address, "unix:")) return true;
  absl::string_view host = HostOf(listen_address);
  if (absl::ConsumePrefix(&host, "[")) absl::ConsumeSuffix(&host, "]");
  if (host == "localhost" || host == "::1") return true;
  // 127.0.0.0/8, written out as four numbers.
  if (!absl::ConsumePrefix(&host, "127.")) return false;
  int parts = 1;
  for (absl::string_view part : absl::StrSplit(host, '.')) {
    int v = 0;
    if (part.empty() || part.size() > 3 || !absl::SimpleAtoi(part, &v) ||
        v > 255 || !absl::ascii_isdigit(static_cast<unsigned char>(part[0]))) {
      return false;
    }
    ++parts;
  }
  return parts == 4;
}

}  // namespace fencegate
