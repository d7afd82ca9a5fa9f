// Copyright fencegate authors.
//
// The etcd token watcher: follows the locks EtcdTokenSource (and `etcdctl
// lock`) keep under a key prefix. A lock's holder is its key with the
// lowest create_revision, and that revision is the holder's token; waiters
// are never reported. See docs/etcd.md.

#ifndef TOKEN_WATCHERS_ETCD_ETCD_WATCHER_H_
#define TOKEN_WATCHERS_ETCD_ETCD_WATCHER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "token_watchers/registry.h"

namespace fencegate {

// The "etcd" factory. `spec.lock_path` is the key prefix (default
// "fencegate/locks"; a trailing '/' is ignored). INVALID_ARGUMENT for an
// empty prefix, a malformed endpoint, "https://" without TLS files, or TLS
// files that cannot be read. Does not connect.
absl::StatusOr<std::unique_ptr<TokenWatcher>> CreateEtcdWatcher(
    const TokenWatcherSpec& spec, TokenWatcherContext context);

}  // namespace fencegate

#endif  // TOKEN_WATCHERS_ETCD_ETCD_WATCHER_H_
