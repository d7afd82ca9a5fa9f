// Copyright fencegate authors.
//
// Reading a Write request off the wire. The gateway's Write method takes the
// request's bytes (gRPC's raw callback API) rather than a parsed message, so
// that a request with more operations than the gateway accepts is refused
// after a walk over its top-level fields, without building its operations: a
// 16 MiB request of 8 million empty operations costs no memory beyond its
// bytes. Everything else is parsed as gRPC would.

#ifndef GATEWAY_WRITE_REQUEST_H_
#define GATEWAY_WRITE_REQUEST_H_

#include <cstdint>

#include "absl/status/status.h"
#include "fencegate/v1/gateway.pb.h"
#include "grpcpp/support/byte_buffer.h"

namespace fencegate {

// Parses `bytes` into `*out` if it holds at most `max_ops` operations.
// INVALID_ARGUMENT naming `ops` and both counts if it holds more (nothing is
// parsed then), or if the bytes are not a WriteRequest. Reads the buffer's
// slices in place. Thread-safe.
absl::Status ParseWriteRequest(const grpc::ByteBuffer& bytes, uint32_t max_ops,
                               v1::WriteRequest* out);

// `response` as the bytes gRPC sends. INTERNAL if it cannot be serialized.
absl::Status SerializeWriteResponse(const v1::WriteResponse& response,
                                    grpc::ByteBuffer* out);

}  // namespace fencegate

#endif  // GATEWAY_WRITE_REQUEST_H_
