// Copyright fencegate authors.

#include "token_watchers/builtin.h"

#include "token_watchers/etcd/etcd_watcher.h"
#include "token_watchers/zookeeper/zookeeper_watcher.h"

namespace fencegate {

absl::Status RegisterBuiltinWatchers(TokenWatcherRegistry& registry) {
  if (absl::Status s = registry.Register("etcd", &CreateEtcdWatcher); !s.ok()) {
    return s;
  }
  return registry.Register("zookeeper", &CreateZooKeeperWatcher);
}

}  // namespace fencegate
