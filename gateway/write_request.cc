// Copyright fencegate authors.

#include "gateway/write_request.h"

#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "fencegate/common/limits.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/support/proto_buffer_reader.h"

namespace fencegate {
namespace {

using google::protobuf::internal::WireFormatLite;

// WriteRequest.ops: field 4, length-delimited.
constexpr uint32_t kOpsTag =
    WireFormatLite::MakeTag(v1::WriteRequest::kOpsFieldNumber,
                            WireFormatLite::WIRETYPE_LENGTH_DELIMITED);

// The number of top-level `ops` fields in `bytes`, or -1 if the bytes do not
// parse as fields.
int64_t CountOps(const grpc::ByteBuffer& bytes) {
  grpc::ByteBuffer copy(bytes);  // Shares the slices.
  grpc::ProtoBufferReader reader(&copy);
  google::protobuf::io::CodedInputStream in(&reader);
  int64_t ops = 0;
  while (true) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0)
      return in.ConsumedEntireMessage() || reader.status().ok() ? ops : -1;
    if (tag == kOpsTag) ++ops;
    if (!WireFormatLite::SkipField(&in, tag)) return -1;
  }
}

}  // namespace

absl::Status ParseWriteRequest(const grpc::ByteBuffer& bytes, uint32_t max_ops,
                               v1::WriteRequest* out) {
  const int64_t ops = CountOps(bytes);
  if (ops > max_ops) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ops: ", ops, " operations exceed the limit of ", max_ops));
  }
  grpc::ByteBuffer copy(bytes);
  grpc::Status s =
      grpc::SerializationTraits<v1::WriteRequest>::Deserialize(&copy, out);
  if (ops < 0 || !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("request: not a fencegate.v1.WriteRequest",
                     s.ok() ? "" : absl::StrCat(" (", s.error_message(), ")")));
  }
  return absl::OkStatus();
}

absl::Status SerializeWriteResponse(const v1::WriteResponse& response,
                                    grpc::ByteBuffer* out) {
  bool own_buffer = false;
  grpc::Status s = grpc::SerializationTraits<v1::WriteResponse>::Serialize(
      response, out, &own_buffer);
  if (!s.ok()) {
    return absl::InternalError(
        absl::StrCat("serializing the response: ", s.error_message()));
  }
  return absl::OkStatus();
}

absl::Status CheckWrite(const Router& router, v1::WriteRequest* request,
                        CheckedWrite* out) {
  if (absl::Status s = ValidateToken(request->token()); !s.ok()) return s;
  if (absl::Status s = ValidateRequestId(request->request_id()); !s.ok()) {
    return s;
  }
  if (absl::Status s =
          ValidateText(request->resource(), "resource", kMaxResourceBytes);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<ResolvedResource> resolved =
      router.Resolve(request->resource());
  if (!resolved.ok()) return resolved.status();
  CheckedWrite& checked = *out;
  checked.resolved = *resolved;
  checked.domain =
      request->domain().empty() ? request->resource() : request->domain();
  if (absl::Status s = ValidateDomain(
          checked.domain,
          request->domain().empty() ? "resource (as domain)" : "domain");
      !s.ok()) {
    return s;
  }
  if (request->ops().empty()) {
    return absl::InvalidArgumentError(
        "ops: at least one operation is required");
  }
  if (absl::Status s =
          Router::ExpandStatements(checked.resolved, request->mutable_ops());
      !s.ok()) {
    return s;
  }
  if (request->seq() != 0 && !checked.resolved.adapter->KeepsSeq()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "seq: route \"", checked.resolved.route,
        "\" does not keep (token, seq) in its storage (PostgreSQL and file "
        "routes do); send seq 0 or leave it unset"));
  }
  if (request->seq() > uint64_t{std::numeric_limits<int64_t>::max()}) {
    return absl::InvalidArgumentError(
        absl::StrCat("seq: ", request->seq(), " is above 2^63-1"));
  }
  for (int i = 0; i < request->ops_size(); ++i) {
    const v1::Operation& op = request->ops(i);
    if ((op.if_absent() || op.has_if_version()) &&
        !checked.resolved.adapter->KeepsVersions()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ops[", i, "]: if_absent and if_version: route \"",
          checked.resolved.route,
          "\" keeps no file versions (file routes do); leave them unset"));
    }
  }
  WriteTarget target{checked.domain, request->token(), checked.resolved.path,
                     request->request_id()};
  target.resource = request->resource();
  target.seq = request->seq();
  if (absl::Status s =
          checked.resolved.adapter->Validate(target, request->ops());
      !s.ok()) {
    return s;
  }
  return absl::OkStatus();
}

absl::Status CheckFenceCall(absl::string_view domain, uint64_t token,
                            bool has_token, absl::string_view request_id) {
  if (absl::Status s = ValidateDomain(domain); !s.ok()) return s;
  if (has_token) {
    if (absl::Status s = ValidateToken(token); !s.ok()) return s;
  }
  return ValidateRequestId(request_id);
}

}  // namespace fencegate
