// Copyright fencegate authors.
//
// Reading a Write request off the wire, and checking it before it takes its
// domain's lane. The gateway's Write method takes the
// request's bytes (gRPC's raw callback API) rather than a parsed message, so
// that a request with more operations or SQL parameters than the gateway
// accepts is refused after a walk over its fields, without building them: a
// 16 MiB request of 8 million empty operations costs no memory beyond its
// bytes. Everything else is parsed as gRPC would.

#ifndef GATEWAY_WRITE_REQUEST_H_
#define GATEWAY_WRITE_REQUEST_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fencegate/v1/gateway.pb.h"
#include "grpcpp/support/byte_buffer.h"
#include "storage_adapters/router.h"

namespace fencegate {

// SQL parameters a Write may carry in all its operations: each costs about
// 80 bytes parsed for as little as 4 on the wire.
inline constexpr int64_t kMaxSqlParamsPerWrite = 65535;

// A Write request's operations and SQL parameters, counted on the wire.
struct WriteShape {
  int64_t ops = 0;
  int64_t params = 0;
};

// Counts `bytes`' operations and SQL parameters without building them.
// INVALID_ARGUMENT naming `ops` and both counts if it holds more than
// `max_ops` operations or kMaxSqlParamsPerWrite parameters, or if the bytes
// are not a WriteRequest. Reads the buffer's slices in place. Thread-safe.
absl::StatusOr<WriteShape> ShapeOfWriteRequest(const grpc::ByteBuffer& bytes,
                                               uint32_t max_ops);

// What a Write of `wire_bytes` holds while it lives: its bytes, which gRPC
// keeps until the reply, and its parsed request, at most its bytes plus 160
// per operation and 80 per SQL parameter (protobuf's messages around them:
// an empty text parameter is 4 bytes on the wire and 77 parsed).
size_t HeldBytesOf(size_t wire_bytes, const WriteShape& shape);

// Parses `bytes`, which ShapeOfWriteRequest() accepted, into `*out`:
// INVALID_ARGUMENT if they do not parse. Thread-safe.
absl::Status DecodeWriteRequest(const grpc::ByteBuffer& bytes,
                                v1::WriteRequest* out);

// ShapeOfWriteRequest(), then DecodeWriteRequest(); the first error.
absl::Status ParseWriteRequest(const grpc::ByteBuffer& bytes, uint32_t max_ops,
                               v1::WriteRequest* out);

// Bytes of SQL text in `request`'s operations, in all. A Write with more
// than kInlineCheckSqlBytes is checked (its SQL parsed and classified) on
// the long-text parser's thread (postgres/sql_parse.h), not on gRPC's.
size_t SqlTextBytes(const v1::WriteRequest& request);
inline constexpr size_t kInlineCheckSqlBytes = 16384;

// A Write that passed CheckWrite.
struct CheckedWrite {
  ResolvedResource resolved;
  // The request's domain, or its resource when the domain is empty.
  std::string domain;
};

// Every check a parsed Write passes before any fence can move, in this
// order: token, request_id, resource (UTF-8), its route, the domain, at
// least one operation, named statements (expanded into `request`'s ops in
// place), a seq and preconditions only where the route keeps them, and the
// route adapter's Validate(). The first failure's status,
// INVALID_ARGUMENT naming the field for a malformed request. `out->resolved`
// is set as soon as the route is known, also when a later check fails (the
// refusal is counted against that route). No I/O; never touches a fence.
// Thread-safe for distinct requests.
absl::Status CheckWrite(const Router& router, v1::WriteRequest* request,
                        CheckedWrite* out);

// The checks of a Fence or Sequence call's fields: domain, token (when the
// call carries one), request_id. INVALID_ARGUMENT naming the field.
absl::Status CheckFenceCall(absl::string_view domain, uint64_t token,
                            bool has_token, absl::string_view request_id);

// `response` as the bytes gRPC sends. INTERNAL if it cannot be serialized.
absl::Status SerializeWriteResponse(const v1::WriteResponse& response,
                                    grpc::ByteBuffer* out);

}  // namespace fencegate

#endif  // GATEWAY_WRITE_REQUEST_H_
