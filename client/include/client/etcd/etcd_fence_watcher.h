// Copyright fencegate authors.
//
// EtcdFenceWatcher: the gateway's side of the etcd token source. It watches
// the lock keys EtcdTokenSource (and `etcdctl lock`) write under a prefix
// and reports each lock's current OWNER, so the gateway can raise that
// domain's fence as soon as a new holder takes over, before the holder's
// first write, and a stale holder is shut out even if the new one never
// calls Fence.
//
// Owner rule: the keys of lock `name` are "<prefix>/<name>/<lease hex>"
// (the name is everything up to the last "/"). The owner is the key with
// the LOWEST create_revision — the same rule the lock recipe uses to decide
// who holds the lock — and the reported token is that create_revision.
// Keys with higher revisions are waiters: raising the fence to a waiter's
// revision would reject the legitimate current holder's writes, so they are
// never reported. A callback comes whenever a name's owner changes (a first
// holder, or the next one after a release or an expired lease); a name with
// no keys left reports nothing. Owners only ever rise, as revisions do.
//
// Start() first reads the whole prefix (Range) and reports every current
// owner, then follows changes with a Watch from the revision after that
// read. After an error (etcd restarted, connection lost) it reconnects with
// backoff and resumes the watch from the last revision it applied; if etcd
// compacted that history away, it reads the prefix again instead. So each
// name's current owner is always reported, and an owner already reported is
// not reported again. An owner that came and went inside one batch of
// changes may be skipped: the one after it has a higher token anyway.
//
// Thread safety: Start() and Stop() must not run concurrently with each
// other; everything else happens on the watcher's own thread. The callback
// runs on that thread, one call at a time, and may block (e.g. on
// Fencer::Fence's durable write) — the watch just falls behind meanwhile.
// It must not call Stop() or destroy the watcher.

#ifndef CLIENT_ETCD_ETCD_FENCE_WATCHER_H_
#define CLIENT_ETCD_ETCD_FENCE_WATCHER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/tls.h"

namespace fencegate::client {

struct EtcdFenceWatcherOptions {
  // etcd client endpoint, "host:port"; "http://host:port" and, with `tls`,
  // "https://host:port" are accepted too.
  // Default: "127.0.0.1:2379".
  std::string endpoint = "127.0.0.1:2379";
  // TLS to etcd: its CA bundle, and a client certificate for an etcd that
  // requires one (--client-cert-auth). Default: plaintext.
  TlsFiles tls;
  // The lock prefix, the same as the workers' EtcdTokenSourceOptions::prefix.
  // A trailing "/" is ignored.
  // Default: "fencegate/locks".
  std::string prefix = "fencegate/locks";
  // Deadline of each Range; also how long Start() waits for the first one.
  // Default: 5 s.
  absl::Duration rpc_timeout = absl::Seconds(5);
  // Longest pause between reconnection attempts (the first is 100 ms, then
  // doubling up to this).
  // Default: 2 s.
  absl::Duration max_backoff = absl::Seconds(2);
  // Told about each error the watcher recovers from by itself (lost
  // connection, compacted history), on the watcher thread, e.g. to log it.
  // Default: none.
  std::function<void(const absl::Status&)> on_error;
};

// A lock's holder as etcd has it now.
struct EtcdLockOwner {
  // The create_revision of the lock's oldest key (its holder's token); 0
  // if nobody holds it.
  uint64_t create_revision = 0;
  // etcd's revision when it answered.
  uint64_t revision = 0;
};

class EtcdFenceWatcher {
 public:
  // `domain` is the lock name, already checked with ValidateDomain
  // (fencing/limits.h; names that fail are skipped and passed to on_error);
  // `token` is its owner's create_revision (>= 1).
  using OwnerCallback =
      std::function<void(const std::string& domain, uint64_t token)>;

  // Does nothing until Start(). `on_owner` must be callable until Stop().
  EtcdFenceWatcher(EtcdFenceWatcherOptions options, OwnerCallback on_owner);
  EtcdFenceWatcher(const EtcdFenceWatcher&) = delete;
  EtcdFenceWatcher& operator=(const EtcdFenceWatcher&) = delete;
  ~EtcdFenceWatcher();  // Stop().

  // Starts the watcher thread and returns once it has read the prefix and
  // reported every current owner (on that thread). INVALID_ARGUMENT for bad
  // options; FAILED_PRECONDITION if already started; UNAVAILABLE if etcd
  // could not be read within rpc_timeout — the watcher is then not running
  // and Start() may be called again.
  absl::Status Start();

  // Cancels the watch, stops and joins the thread. No callback runs after
  // Stop() returns. Idempotent; a stopped watcher cannot be restarted.
  void Stop();

  // Lock `name`'s holder, read now (one Range of "<prefix>/<name>/", up to
  // rpc_timeout). FAILED_PRECONDITION before Start(); UNAVAILABLE if etcd
  // cannot be reached. Thread safe; blocks.
  absl::StatusOr<EtcdLockOwner> OwnerOf(const std::string& name);

 private:
  class Impl;  // client/etcd/etcd_fence_watcher.cc
  const std::unique_ptr<Impl> impl_;
};

}  // namespace fencegate::client

#endif  // CLIENT_ETCD_ETCD_FENCE_WATCHER_H_
