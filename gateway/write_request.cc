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
// Operation.sql and SqlStatement.params, length-delimited.
constexpr uint32_t kSqlTag = WireFormatLite::MakeTag(
    v1::Operation::kSqlFieldNumber, WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
constexpr uint32_t kParamsTag =
    WireFormatLite::MakeTag(v1::SqlStatement::kParamsFieldNumber,
                            WireFormatLite::WIRETYPE_LENGTH_DELIMITED);

using google::protobuf::io::CodedInputStream;

// Counts the fields tagged `tag` in the next `length` bytes of `in`, and
// calls `inner` on each (their bytes limited to the field); false if they
// do not parse as fields.
template <typename Inner>
bool CountFields(CodedInputStream& in, uint32_t tag, Inner&& inner,
                 int64_t* count) {
  while (true) {
    const uint32_t t = in.ReadTag();
    if (t == 0) return in.ConsumedEntireMessage() || in.BytesUntilLimit() == 0;
    if (t != tag) {
      if (!WireFormatLite::SkipField(&in, t)) return false;
      continue;
    }
    ++*count;
    uint32_t length = 0;
    if (!in.ReadVarint32(&length)) return false;
    const CodedInputStream::Limit limit =
        in.PushLimit(static_cast<int>(length));
    if (!inner(in) || in.BytesUntilLimit() != 0) return false;
    in.PopLimit(limit);
  }
}

// The top-level `ops` of `bytes`, and the SQL parameters of all of them,
// read without building them; false if the bytes do not parse as fields.
bool CountOpsAndParams(const grpc::ByteBuffer& bytes, int64_t* ops,
                       int64_t* params) {
  grpc::ByteBuffer copy(bytes);  // Shares the slices.
  grpc::ProtoBufferReader reader(&copy);
  CodedInputStream in(&reader);
  in.SetTotalBytesLimit(std::numeric_limits<int>::max());
  auto skip = [](CodedInputStream& field) {
    return field.Skip(field.BytesUntilLimit());
  };
  auto count_params = [&](CodedInputStream& sql) {
    return CountFields(sql, kParamsTag, skip, params);
  };
  auto count_sql = [&](CodedInputStream& op) {
    int64_t statements = 0;
    return CountFields(op, kSqlTag, count_params, &statements);
  };
  return CountFields(in, kOpsTag, count_sql, ops) && reader.status().ok();
}

}  // namespace

absl::StatusOr<WriteShape> ShapeOfWriteRequest(const grpc::ByteBuffer& bytes,
                                               uint32_t max_ops) {
  WriteShape shape;
  const bool fields = CountOpsAndParams(bytes, &shape.ops, &shape.params);
  if (shape.ops > max_ops) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ops: ", shape.ops, " operations exceed the limit of ", max_ops));
  }
  if (shape.params > kMaxSqlParamsPerWrite) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ops: ", shape.params, " SQL parameters in all exceed the limit of ",
        kMaxSqlParamsPerWrite, " per Write"));
  }
  if (!fields) {
    return absl::InvalidArgumentError(
        "request: not a fencegate.v1.WriteRequest");
  }
  return shape;
}

size_t HeldBytesOf(size_t wire_bytes, const WriteShape& shape) {
  return 2 * wire_bytes + 160 * static_cast<size_t>(shape.ops) +
         80 * static_cast<size_t>(shape.params);
}

absl::Status ParseWriteRequest(const grpc::ByteBuffer& bytes, uint32_t max_ops,
                               v1::WriteRequest* out) {
  if (absl::StatusOr<WriteShape> shape = ShapeOfWriteRequest(bytes, max_ops);
      !shape.ok()) {
    return shape.status();
  }
  return DecodeWriteRequest(bytes, out);
}

absl::Status DecodeWriteRequest(const grpc::ByteBuffer& bytes,
                                v1::WriteRequest* out) {
  grpc::ByteBuffer copy(bytes);
  grpc::Status s =
      grpc::SerializationTraits<v1::WriteRequest>::Deserialize(&copy, out);
  if (!s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request: not a fencegate.v1.WriteRequest (", s.error_message(), ")"));
  }
  return absl::OkStatus();
}

size_t SqlTextBytes(const v1::WriteRequest& request) {
  size_t bytes = 0;
  for (const v1::Operation& op : request.ops()) {
    if (op.has_sql()) bytes += op.sql().sql().size();
  }
  return bytes;
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
