// Copyright fencegate authors.
//
// The one place where absl::Status becomes grpc::Status.

#ifndef COMMON_GRPC_STATUS_H_
#define COMMON_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace fencegate {

// Same code and message. Every payload of `status` (e.g. the StaleToken of a
// stale-token error) becomes a google.protobuf.Any detail of a
// google.rpc.Status sent in the `grpc-status-details-bin` trailer.
grpc::Status ToGrpcStatus(const absl::Status& status);

// The reverse, for clients: code, message, and the details as payloads.
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace fencegate

#endif  // COMMON_GRPC_STATUS_H_
