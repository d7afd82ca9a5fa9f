// Copyright fencegate authors.
//
// The gateway calls a token source makes around an acquisition. Private to
// client/.

#ifndef CLIENT_GATEWAY_FENCE_H_
#define CLIENT_GATEWAY_FENCE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"

namespace fencegate::client::internal {

// Raises `name`'s fence to `token` (Gateway.Fence). The gateway's error,
// its message prefixed with "gateway Fence: ". Each call has `timeout`.
absl::Status RaiseFence(const std::shared_ptr<grpc::Channel>& gateway,
                        const std::string& name, uint64_t token,
                        absl::Duration timeout = absl::Seconds(10));

// The domain's highest token (Gateway.GetFence).
absl::StatusOr<uint64_t> ReadFence(
    const std::shared_ptr<grpc::Channel>& gateway, const std::string& name,
    absl::Duration timeout = absl::Seconds(10));

// A token of the gateway's: the fence raised by one (Gateway.Sequence).
absl::StatusOr<uint64_t> NextToken(
    const std::shared_ptr<grpc::Channel>& gateway, const std::string& name,
    absl::Duration timeout = absl::Seconds(10));

}  // namespace fencegate::client::internal

#endif  // CLIENT_GATEWAY_FENCE_H_
