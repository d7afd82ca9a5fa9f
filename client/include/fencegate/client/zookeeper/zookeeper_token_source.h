// Copyright fencegate authors.
//
// ZooKeeperTokenSource: locks from ZooKeeper with the Curator-style
// recipe, and the holder's znode's czxid as the fencing token.
//
// Each Acquire opens a ZooKeeper session of its own (its timeout is the
// lock's ttl, raised by the server to its minSessionTimeout if lower) and
// creates an ephemeral sequential znode "lock-" under "<lock_path>/<name>".
// The oldest znode holds the lock; a waiter watches only its predecessor,
// and looks again when that one goes. The token is the holder's czxid: the
// zxid of the transaction that created its znode, 64-bit and rising across
// the whole ensemble -- not the sequence number, which is 32-bit, counted
// per parent and wraps (ZOOKEEPER-2944). Before Acquire returns the source
// raises the gateway's fence to the token (Fence).
//
// The lock is lost -- `on_lost` runs once -- when the session expires, when
// the holder's znode is deleted, or when the session stays disconnected for
// the ttl (after which the server will have expired it).

#ifndef CLIENT_ZOOKEEPER_ZOOKEEPER_TOKEN_SOURCE_H_
#define CLIENT_ZOOKEEPER_ZOOKEEPER_TOKEN_SOURCE_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fencegate/client/token_source.h"
#include "grpcpp/channel.h"

namespace fencegate::client {

struct ZooKeeperTokenSourceOptions {
  // ZooKeeper connect string: "host:port[,host:port...]". Required.
  std::string hosts;
  // Parent of the locks' znodes, created if missing. Default:
  // "/fencegate/locks".
  std::string lock_path = "/fencegate/locks";
  // How long to wait for a session. Default: 10 s.
  absl::Duration connect_timeout = absl::Seconds(10);
  // The gateway whose fence is raised on every acquisition. Required.
  std::shared_ptr<grpc::Channel> gateway;
};

class ZooKeeperTokenSource final : public TokenSource {
 public:
  // INVALID_ARGUMENT for no hosts, a lock_path that is not an absolute
  // path without a trailing '/', or no gateway. Does not connect.
  static absl::StatusOr<std::unique_ptr<ZooKeeperTokenSource>> Create(
      ZooKeeperTokenSourceOptions options);
  ~ZooKeeperTokenSource() override;

  // See TokenSource::Acquire. The name's '/'-separated parts become znodes
  // under lock_path (INVALID_ARGUMENT for an empty part, "." or ".."),
  // created if missing. UNAVAILABLE if no session could be had within
  // connect_timeout; DEADLINE_EXCEEDED if the lock stays held for
  // options.wait (this waiter's znode is then deleted).
  absl::StatusOr<std::unique_ptr<HeldLock>> Acquire(
      const std::string& name, const LockOptions& options,
      std::function<void()> on_lost) override;

 private:
  explicit ZooKeeperTokenSource(ZooKeeperTokenSourceOptions options);
  const ZooKeeperTokenSourceOptions options_;
};

}  // namespace fencegate::client

#endif  // CLIENT_ZOOKEEPER_ZOOKEEPER_TOKEN_SOURCE_H_
