// Copyright fencegate authors.
//
// The ZooKeeper token watcher: follows the locks ZooKeeperTokenSource (and
// Curator's InterProcessMutex layout: ephemeral sequential "lock-" znodes)
// keep under a parent znode. Lock `name` is the znode "<lock_path>/<name>";
// its holder is its oldest "lock-" child, and the holder's token is that
// child's czxid. Waiters are never reported. See docs/token-sources.md.

#ifndef TOKEN_WATCHERS_ZOOKEEPER_ZOOKEEPER_WATCHER_H_
#define TOKEN_WATCHERS_ZOOKEEPER_ZOOKEEPER_WATCHER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "token_watchers/registry.h"

namespace fencegate {

// The "zookeeper" factory. `spec.endpoint` is a connect string
// "host:port[,host:port...]"; `spec.lock_path` the parent znode (default
// "/fencegate/locks"). INVALID_ARGUMENT for a lock_path that is not an
// absolute path without a trailing '/', and for TLS files (Debian's C
// client has no TLS). Does not connect. A session may take up to three
// rpc_timeouts to open.
absl::StatusOr<std::unique_ptr<TokenWatcher>> CreateZooKeeperWatcher(
    const TokenWatcherSpec& spec, TokenWatcherContext context);

}  // namespace fencegate

#endif  // TOKEN_WATCHERS_ZOOKEEPER_ZOOKEEPER_WATCHER_H_
