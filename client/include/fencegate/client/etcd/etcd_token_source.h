// Copyright fencegate authors.
//
// EtcdTokenSource: locks and fencing tokens from etcd v3, by the recipe of
// etcd's concurrency package (`etcdctl lock` uses the same keys, so the two
// exclude each other):
//
//   1. LeaseGrant with LockOptions::ttl (rounded up to whole seconds; etcd
//      may raise it to its minimum).
//   2. Txn: if "<prefix>/<name>/<lease ID in hex>" does not exist, put it
//      with the lease. Its create_revision is this holder's place in line.
//   3. Wait (a Watch on "<prefix>/<name>/", bounded by LockOptions::wait)
//      until no key of this name has a lower create_revision: the holder is
//      the oldest key. Keys of nested names ("<name>/x/...") do not count.
//   4. Keep the lease alive in the background until Release().
//
// THE FENCING TOKEN IS THE LOCK KEY'S create_revision, NOT THE LEASE ID.
// create_revision is etcd's global revision at the Txn that created the
// key; revisions only grow, across leases, keys and restarts, and the next
// holder's key is necessarily created after ours, so its revision is
// strictly higher. Lease IDs carry no such order: the member that takes the
// LeaseGrant makes one up from its member ID (top 16 bits) and a
// millisecond clock plus a counter (the rest), so IDs from different
// members, or from one member restarted with its clock set back, compare
// in any order, and a client may even ask for the ID it wants. etcd#11788
// (the docs' lease-based fencing example does no real ordering check) and
// etcd's "Notes on the usage of lock and lease" make the same point: fence
// with the key's revision. A lease-ID token could go backwards and fence
// out the rightful holder, or let a stale one in.
//
// Release() deletes the key only if its create_revision is still ours (a
// Txn comparing CREATE), then revokes the lease.
//
// Thread safety: EtcdTokenSource is safe for concurrent use; see HeldLock
// (client/token_source.h) for the locks it returns. The locks share the
// source's connection and may outlive it.

#ifndef CLIENT_ETCD_ETCD_TOKEN_SOURCE_H_
#define CLIENT_ETCD_ETCD_TOKEN_SOURCE_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fencegate/client/tls.h"
#include "fencegate/client/token_source.h"

namespace fencegate::client {

namespace etcd_internal {
class EtcdConnection;
}  // namespace etcd_internal

struct EtcdTokenSourceOptions {
  // etcd client endpoint, "host:port"; "http://host:port" and, with `tls`,
  // "https://host:port" are accepted too.
  // Default: "127.0.0.1:2379".
  std::string endpoint = "127.0.0.1:2379";
  // TLS to etcd: its CA bundle, and a client certificate for an etcd that
  // requires one (--client-cert-auth). Default: plaintext.
  TlsFiles tls;
  // Where the locks live: lock `name` is the keys under "<prefix>/<name>/".
  // Must be the prefix the gateway's EtcdFenceWatcher watches. A trailing
  // "/" is ignored.
  // Default: "fencegate/locks".
  std::string prefix = "fencegate/locks";
  // Deadline of each etcd call (not of the wait for the lock, which is
  // LockOptions::wait). While etcd restarts, calls wait for it up to this.
  // Default: 5 s.
  absl::Duration rpc_timeout = absl::Seconds(5);
};

class EtcdTokenSource final : public TokenSource {
 public:
  // INVALID_ARGUMENT for an empty endpoint, an https endpoint without
  // `tls`, unreadable TLS files, an empty prefix or a non-positive
  // rpc_timeout. Does not contact etcd.
  static absl::StatusOr<std::unique_ptr<EtcdTokenSource>> Create(
      const EtcdTokenSourceOptions& options);
  ~EtcdTokenSource() override;

  // See TokenSource::Acquire. The name must be a valid fencing domain
  // (common/limits.h): INVALID_ARGUMENT otherwise, or for ttl <= 0 or
  // wait < 0. DEADLINE_EXCEEDED if an older key still holds the name when
  // options.wait ends; this waiter's key and lease are then removed.
  // UNAVAILABLE if etcd cannot be reached, or if this waiter's lease ended
  // while it waited. The key's value is options.owner ("<host>:<pid>" if
  // empty). Blocks for up to options.wait plus a few RPC timeouts.
  //
  // The returned lock's token() is its key's create_revision. `on_lost`
  // runs once, on the keep-alive thread, if etcd reports the lease gone or
  // no keep-alive succeeds before the lease's expiry; it must not call
  // Release() or destroy the lock (signal another thread instead).
  // Release(): OK; FAILED_PRECONDITION if the key is gone or is no longer
  // ours (expired lease, deleted or re-created by someone else) — the key
  // is then left alone; UNAVAILABLE if etcd cannot be reached (the lease
  // then simply expires). After Release(), lost() is true.
  absl::StatusOr<std::unique_ptr<HeldLock>> Acquire(
      const std::string& name, const LockOptions& options,
      std::function<void()> on_lost) override;

 private:
  EtcdTokenSource(std::string prefix,
                  std::shared_ptr<etcd_internal::EtcdConnection> connection);

  const std::string prefix_;
  const std::shared_ptr<etcd_internal::EtcdConnection> connection_;
};

}  // namespace fencegate::client

#endif  // CLIENT_ETCD_ETCD_TOKEN_SOURCE_H_
