// Copyright fencegate authors.
//
// RedlockTokenSource: locks from N independent Redis servers, the Redlock
// algorithm of the Redis documentation, with fencing tokens from the
// gateway.
//
// Acquire sets "{<prefix>:<name>}:lock" to a unique holder id (SET NX PX
// ttl) on every server, one after another with a short timeout each, and
// holds the lock if a majority (N/2 + 1) took it and time is left of the
// ttl after the time spent and a clock-drift allowance (ttl x 1% + 2 ms).
// Otherwise it removes its keys everywhere and tries again after a random
// pause, until LockOptions::wait.
//
// Redlock has no counter a token can come from: an INCR on each server is
// not monotonic across majorities (two holders' majorities share only one
// server, whose counter the other servers never saw). So the token comes
// from the gateway: Gateway.Sequence raises the domain's fence by one,
// durably, and returns it -- which also shuts out the previous holder at
// once. Renewals (every ttl/3) must reach a majority within the ttl, or the
// lock is lost; Release removes the key everywhere it is still ours.

#ifndef CLIENT_REDIS_REDLOCK_TOKEN_SOURCE_H_
#define CLIENT_REDIS_REDLOCK_TOKEN_SOURCE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fencegate/client/token_source.h"
#include "grpcpp/channel.h"

namespace fencegate::client {

struct RedlockTokenSourceOptions {
  // "host:port" of each independent Redis server; at least one, usually 3
  // or 5.
  std::vector<std::string> endpoints;
  // Key prefix. Default: "fencegate".
  std::string prefix = "fencegate";
  // Connect and command timeout on each server; small against the ttl, so
  // that a server that is down costs little of it. Default: 100 ms.
  absl::Duration node_timeout = absl::Milliseconds(100);
  // The gateway that issues the tokens (Sequence). Required.
  std::shared_ptr<grpc::Channel> gateway;
};

class RedlockTokenSource final : public TokenSource {
 public:
  // INVALID_ARGUMENT for no endpoints or a malformed one, duplicates, an
  // empty prefix, a non-positive node_timeout or no gateway. Does not
  // connect.
  static absl::StatusOr<std::unique_ptr<RedlockTokenSource>> Create(
      RedlockTokenSourceOptions options);
  ~RedlockTokenSource() override;

  // See TokenSource::Acquire. UNAVAILABLE naming how many servers answered
  // if fewer than a majority can be reached; DEADLINE_EXCEEDED if the lock
  // stays held for options.wait; the gateway's error if Sequence fails (the
  // keys are then removed).
  absl::StatusOr<std::unique_ptr<HeldLock>> Acquire(
      const std::string& name, const LockOptions& options,
      std::function<void()> on_lost) override;

 private:
  explicit RedlockTokenSource(RedlockTokenSourceOptions options);
  const RedlockTokenSourceOptions options_;
};

}  // namespace fencegate::client

#endif  // CLIENT_REDIS_REDLOCK_TOKEN_SOURCE_H_
