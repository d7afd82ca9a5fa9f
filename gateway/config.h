// Copyright fencegate authors.
//
// The gateway's validated configuration, built once at start-up from the
// configuration file (fencegate.v1.GatewayConfig in protobuf text format)
// and the command-line flags, which override it.

#ifndef GATEWAY_CONFIG_H_
#define GATEWAY_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "fencegate/client/tls.h"
#include "fencegate/v1/config.pb.h"
#include "observability/log.h"
#include "security/server_tls.h"
#include "storage_adapters/router.h"
#include "token_watchers/registry.h"

namespace fencegate {

// Built by ResolveOptions only, the one place that turns the configuration
// into options: every field holds what the configuration says, or its
// schema default (config.proto's `setting` options, the only place a
// default is written; the "Default:" notes below repeat them for the
// reader). A GatewayOptions left as constructed holds zeros, which
// GatewayServer::Start refuses where they cannot work.
struct GatewayOptions {
  // host:port; port 0 picks a free port (see GatewayServer::port()).
  // Default: 127.0.0.1:7070.
  std::string listen_address;
  // Absolute path of the data directory; the fence store lives in
  // <data_dir>/fence. Default: ./fencegate-data made absolute.
  std::string data_dir;
  // Default: {"files", "file://<data_dir>/files"}.
  std::vector<RouteSpec> routes;
  // Largest request accepted. Default: 16 MiB.
  uint32_t max_message_bytes{};
  // Most operations in one Write. Default: 1000.
  uint32_t max_ops_per_write{};
  // Client connections open at once on the gRPC port (TCP only); more are
  // closed at accept. Default: 1000.
  uint32_t max_connections{};
  // Concurrent RPCs on one connection. Default: 100.
  uint32_t max_concurrent_streams{};
  // gRPC's ResourceQuota, in bytes. Default: 512 MiB.
  uint64_t memory_limit_bytes{};
  // Connection age before GOAWAY, and the grace after it. Default: 600 s,
  // 60 s.
  absl::Duration max_connection_age;
  absl::Duration max_connection_age_grace;
  // Idle connections are closed after it. Default: 300 s.
  absl::Duration max_connection_idle;
  // HTTP/2 handshake deadline of a new connection. Default: 10 s.
  absl::Duration handshake_timeout;
  // Fences kept in memory. Default: 100000.
  uint32_t max_cached_domains{};
  // Acquire calls waiting at once. Default: 1024.
  uint32_t max_waiting_acquires{};
  // Threads for fence syncs and storage I/O. Default: max(4, 2 * cores).
  uint32_t io_threads{};
  // Threads serving the gRPC API, one completion queue each. Default:
  // max(1, cores / 4).
  uint32_t queue_threads{};
  // How long SIGTERM waits for in-flight requests. Default: 30 s.
  absl::Duration shutdown_grace;
  // Log every accepted write, not only fence advances and errors.
  // Default: false.
  bool log_writes{};
  // The log's format on stderr. Default: text.
  LogFormat log_format{};
  // host:port serving GET /metrics; empty: metrics off. Default: off.
  std::string metrics_listen;
  // The lock services whose locks the gateway follows, raising each lock's
  // fence to its new holder's token (token_watchers/). Default: none.
  std::vector<TokenWatcherSpec> watchers;
  // TLS on the gRPC port. Default: plaintext.
  ServerTlsOptions tls;
  // Access policy file (needs mTLS); re-read by GatewayServer::Reload().
  // Default: none.
  std::string policy_path;
  // Serve a non-loopback address without mTLS and a policy. Default: false.
  bool insecure_allow_remote{};
  // Audit log file. Default: none.
  std::string audit_log_path;
  // The PostgreSQL protocol port: host:port, or empty (off). Default: off.
  std::string pg_listen;
  // Its user file; empty admits every client (loopback only).
  std::string pg_user_file;
  // Default: 100.
  uint32_t pg_max_connections{};
  // Default: 60 s; zero: never.
  absl::Duration pg_idle_transaction_timeout;
};

// Whether `listen_address` ("host:port") only accepts connections from this
// machine: 127.0.0.0/8, ::1, localhost, or a unix: socket.
bool IsLoopbackAddress(absl::string_view listen_address);

// Reads a GatewayConfig text proto. INVALID_ARGUMENT with the file name,
// line and column of the first error; NOT_FOUND if it cannot be read.
absl::StatusOr<v1::GatewayConfig> LoadConfigFile(const std::string& path);

// Fills the schema's defaults into `config` (settings.h) and validates it;
// creates the data directory if missing. INVALID_ARGUMENT names the offending
// field, and refuses a non-loopback listen address without mTLS and a policy
// unless insecure_allow_remote is set.
absl::StatusOr<GatewayOptions> ResolveOptions(const v1::GatewayConfig& config);

}  // namespace fencegate

#endif  // GATEWAY_CONFIG_H_
