// Copyright fencegate authors.
//
// TokenWatcher: the gateway's view of one lock service. A watcher follows
// the locks its lock service holds under a configured prefix and reports
// each lock's holder as soon as it changes, so that the gateway raises that
// domain's fence to the new holder's token before the holder's first write
// (a paused previous holder is then shut out everywhere, not only where the
// new holder has written). A lock's name is the fencing domain.
//
// Implementations: etcd (token_watchers/etcd/) and ZooKeeper
// (token_watchers/zookeeper/). They are built by the TokenWatcherRegistry
// (token_watchers/registry.h) from a TokenWatcherSpec.
//
// Thread safety: Start() and Stop() must not run concurrently with each
// other. HolderOf() and connected() are safe to call from any thread once
// Start() has succeeded. Reports (TokenWatcherContext::on_holder) run on the
// watcher's own thread, one at a time.

#ifndef TOKEN_WATCHERS_TOKEN_WATCHER_H_
#define TOKEN_WATCHERS_TOKEN_WATCHER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fencegate {

// A lock's holder as its lock service has it now.
struct LockHolder {
  // The holder's fencing token (etcd: the create_revision of the lock's
  // oldest key; ZooKeeper: the czxid of its oldest znode); 0 if nobody
  // holds the lock.
  uint64_t token = 0;
  // The newest token the lock service could have issued when it answered
  // (etcd: its revision; ZooKeeper: the newest zxid the watcher has seen).
  // A token above it was never issued by anyone.
  uint64_t newest = 0;
};

class TokenWatcher {
 public:
  TokenWatcher() = default;
  TokenWatcher(const TokenWatcher&) = delete;
  TokenWatcher& operator=(const TokenWatcher&) = delete;
  // Stops the watcher if it is running.
  virtual ~TokenWatcher() = default;

  // The lock service's kind, as registered ("etcd", "zookeeper").
  virtual absl::string_view kind() const = 0;

  // Connects, reports every lock's current holder (on the watcher's
  // thread), and returns once that is done; then follows changes until
  // Stop(), reconnecting by itself after errors. FAILED_PRECONDITION if
  // already started or stopped; UNAVAILABLE if the lock service could not
  // be read in time -- the watcher is then not running and Start() may be
  // called again.
  virtual absl::Status Start() = 0;

  // Stops following and joins the watcher's thread; no report runs after
  // it returns. Idempotent; a stopped watcher cannot be restarted.
  virtual void Stop() = 0;

  // The holder of the lock named `domain`, asked of the lock service now.
  // UNAVAILABLE if the lock service cannot be reached (for ZooKeeper also
  // while the watcher has no session, before Start() included);
  // FAILED_PRECONDITION for etcd before Start(). Blocks: etcd for up to the RPC
  // timeout; ZooKeeper for up to the RPC timeout for its sync, then for up
  // to its client's request timeout (two thirds of the 10 s session) for
  // each read.
  virtual absl::StatusOr<LockHolder> HolderOf(const std::string& domain) = 0;

  // Whether the watcher is following its lock service right now (connected
  // and watching). Never blocks.
  virtual bool connected() const = 0;
};

}  // namespace fencegate

#endif  // TOKEN_WATCHERS_TOKEN_WATCHER_H_
