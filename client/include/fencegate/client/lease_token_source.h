// Copyright fencegate authors.
//
// LeaseTokenSource: a TokenSource over the gateway's built-in lease service
// (fencegate.v1.Lease). Keep-alive runs on a background thread every ttl/3;
// a NOT_FOUND answer (lease lost), or no successful renewal before the ttl
// runs out, marks the lock lost and calls on_lost.

#ifndef CLIENT_LEASE_TOKEN_SOURCE_H_
#define CLIENT_LEASE_TOKEN_SOURCE_H_

#include <memory>
#include <string>

#include "fencegate/client/token_source.h"
#include "grpcpp/channel.h"

namespace fencegate::client {

class LeaseTokenSource final : public TokenSource {
 public:
  // `channel` to a gateway; shared with the caller.
  explicit LeaseTokenSource(std::shared_ptr<grpc::Channel> channel);
  ~LeaseTokenSource() override;

  absl::StatusOr<std::unique_ptr<HeldLock>> Acquire(
      const std::string& name, const LockOptions& options,
      std::function<void()> on_lost) override;

 private:
  std::shared_ptr<grpc::Channel> channel_;
};

}  // namespace fencegate::client

#endif  // CLIENT_LEASE_TOKEN_SOURCE_H_
