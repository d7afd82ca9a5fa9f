// Copyright fencegate authors.
//
// TokenWatcherRegistry: builds token watchers by kind ("etcd",
// "zookeeper"). Filled by an explicit RegisterBuiltinWatchers() call
// (token_watchers/builtin.h), like the storage adapters' registry.

#ifndef TOKEN_WATCHERS_REGISTRY_H_
#define TOKEN_WATCHERS_REGISTRY_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fencegate/client/tls.h"
#include "metrics/metrics_context.h"
#include "token_watchers/token_watcher.h"

namespace fencegate {

// What to watch. Parsed from the config file or flags once, at start-up.
struct TokenWatcherSpec {
  // The registry key: "etcd" or "zookeeper".
  std::string kind;
  // Where the lock service is: etcd "host:port" (or "http(s)://host:port");
  // a ZooKeeper connect string "host:port[,host:port...]". Required.
  std::string endpoint;
  // Where its locks are: the etcd key prefix, or the ZooKeeper parent znode
  // (an absolute path). Empty: the kind's default, the same as its token
  // source's ("fencegate/locks", "/fencegate/locks").
  std::string lock_path;
  // TLS to the lock service (etcd only). Default: plaintext.
  client::TlsFiles tls;
  // Deadline of each call to the lock service (etcd; ZooKeeper's sync), and
  // how long a connection may take to open (ZooKeeper: three times this).
  // Default: 5 s.
  absl::Duration rpc_timeout = absl::Seconds(5);
};

// What a watcher is handed by the gateway: where to report, and where to
// tell about errors. Metrics and a clock join it here.
struct TokenWatcherContext {
  // Called with each lock's new holder: a lock name that passed
  // ValidateDomain (common/limits.h) and its holder's token (>= 1). Runs on
  // the watcher's thread, one call at a time, and may block (the watch falls
  // behind meanwhile). Must not call Stop() or destroy the watcher.
  // Required.
  std::function<void(const std::string& domain, uint64_t token)> on_holder;
  // Told about each error the watcher recovers from by itself (lost
  // connection, expired session, a lock name that is not a valid domain),
  // on the watcher's thread. Default: none.
  std::function<void(const absl::Status&)> on_error;
  // Where the watcher exports fencegate_watcher_connected{source=<kind>}
  // (1 while connected() is true, read at scrape). Default: metrics off.
  MetricsContext metrics;
};

// Builds an unstarted watcher from a spec whose kind matched.
// INVALID_ARGUMENT naming the field for a bad spec. Does not connect.
using TokenWatcherFactory =
    std::function<absl::StatusOr<std::unique_ptr<TokenWatcher>>(
        const TokenWatcherSpec&, TokenWatcherContext)>;

// For watchers: exports fencegate_watcher_connected{source=`kind`}, read
// from `connected` at each scrape, until the returned handle is destroyed
// (null when metrics are off).
std::shared_ptr<void> ExportConnected(const MetricsContext& metrics,
                                      absl::string_view kind,
                                      const std::atomic<bool>& connected);

// Thread safety: Register() must complete before concurrent Create() calls;
// Create() is then safe for concurrent use.
class TokenWatcherRegistry {
 public:
  TokenWatcherRegistry() = default;
  TokenWatcherRegistry(const TokenWatcherRegistry&) = delete;
  TokenWatcherRegistry& operator=(const TokenWatcherRegistry&) = delete;

  // ALREADY_EXISTS if `kind` is registered.
  absl::Status Register(std::string kind, TokenWatcherFactory factory);

  // Calls the factory of `spec.kind`. INVALID_ARGUMENT, naming the kind and
  // listing the known ones, for an unknown kind, and for a context without
  // on_holder.
  absl::StatusOr<std::unique_ptr<TokenWatcher>> Create(
      const TokenWatcherSpec& spec, TokenWatcherContext context) const;

  // Registered kinds, sorted.
  std::vector<std::string> Kinds() const;

 private:
  absl::flat_hash_map<std::string, TokenWatcherFactory> factories_;
};

}  // namespace fencegate

#endif  // TOKEN_WATCHERS_REGISTRY_H_
