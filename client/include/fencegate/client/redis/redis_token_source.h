// Copyright fencegate authors.
//
// RedisTokenSource: locks from a single Redis server, with fencing tokens
// from a counter beside each lock (Redisson's RFencedLock scheme).
//
// Lock `name` is the key "{<prefix>:<name>}:lock", holding this holder's
// unique id with a PX expiry; its token counter is "{<prefix>:<name>}:token"
// (the same hash slot, for Redis Cluster). Each step is one Lua script:
//   acquire  SET lock id NX PX ttl, and on success INCR the counter;
//   renew    PEXPIRE lock, only while it still holds our id;
//   release  DEL lock, only while it still holds our id.
// A Redis failover can lose increments, leaving the counter at or below the
// gateway's fence, where every token it gives would be refused for ever.
// So after acquiring, the source reads the domain's fence from the gateway;
// if the counter is not above it, one script (still as the holder) raises
// the counter to the fence and takes the next token. Then the source raises
// the gateway's fence to the token (Fence) before Acquire returns, so that a
// paused previous holder is shut out even of resources the new holder has
// not written yet.

#ifndef CLIENT_REDIS_REDIS_TOKEN_SOURCE_H_
#define CLIENT_REDIS_REDIS_TOKEN_SOURCE_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fencegate/client/token_source.h"
#include "grpcpp/channel.h"

namespace fencegate::client {

struct RedisTokenSourceOptions {
  // "host:port" of the Redis server. Default: "127.0.0.1:6379".
  std::string endpoint = "127.0.0.1:6379";
  // Key prefix; see above. Default: "fencegate".
  std::string prefix = "fencegate";
  // Connect and command timeout. Default: 5 s.
  absl::Duration rpc_timeout = absl::Seconds(5);
  // The gateway whose fences the tokens are for: read (GetFence) and raised
  // (Fence) on every acquisition. Required.
  std::shared_ptr<grpc::Channel> gateway;
};

class RedisTokenSource final : public TokenSource {
 public:
  // INVALID_ARGUMENT for a malformed endpoint, an empty prefix, a
  // non-positive rpc_timeout or no gateway. Does not connect.
  static absl::StatusOr<std::unique_ptr<RedisTokenSource>> Create(
      RedisTokenSourceOptions options);
  ~RedisTokenSource() override;

  // See TokenSource::Acquire. Polls every 50 ms while the lock is held by
  // another, up to options.wait: DEADLINE_EXCEEDED naming the holder.
  // UNAVAILABLE if Redis or the gateway cannot be reached; the gateway's
  // own error if it refuses the fence (e.g. PERMISSION_DENIED). The lock's
  // key expires after options.ttl unless renewed; renewals run every ttl/3
  // on a thread of the lock's, on a connection of its own. `on_lost` runs
  // once if a renewal finds the key gone or someone else's, or none
  // succeeds within the ttl. Release(): FAILED_PRECONDITION if the key is
  // no longer ours (left alone).
  absl::StatusOr<std::unique_ptr<HeldLock>> Acquire(
      const std::string& name, const LockOptions& options,
      std::function<void()> on_lost) override;

 private:
  explicit RedisTokenSource(RedisTokenSourceOptions options);
  const RedisTokenSourceOptions options_;
};

}  // namespace fencegate::client

#endif  // CLIENT_REDIS_REDIS_TOKEN_SOURCE_H_
