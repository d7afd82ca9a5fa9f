// Copyright fencegate authors.

#include "client/gateway_fence.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "fencegate/v1/gateway.grpc.pb.h"

namespace fencegate::client::internal {
namespace {

absl::Status FromGrpc(const grpc::Status& s, absl::string_view what) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat("gateway ", what, ": ", s.error_message()));
}

void SetDeadline(grpc::ClientContext* context, absl::Duration timeout) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

}  // namespace

absl::Status RaiseFence(const std::shared_ptr<grpc::Channel>& gateway,
                        const std::string& name, uint64_t token,
                        absl::Duration timeout) {
  v1::FenceRequest request;
  request.set_domain(name);
  request.set_token(token);
  v1::FenceState fence;
  grpc::ClientContext context;
  SetDeadline(&context, timeout);
  grpc::Status s =
      v1::Gateway::NewStub(gateway)->Fence(&context, request, &fence);
  return s.ok() ? absl::OkStatus() : FromGrpc(s, "Fence");
}

absl::StatusOr<uint64_t> ReadFence(
    const std::shared_ptr<grpc::Channel>& gateway, const std::string& name,
    absl::Duration timeout) {
  v1::GetFenceRequest request;
  request.set_domain(name);
  v1::FenceState fence;
  grpc::ClientContext context;
  SetDeadline(&context, timeout);
  grpc::Status s =
      v1::Gateway::NewStub(gateway)->GetFence(&context, request, &fence);
  if (!s.ok()) return FromGrpc(s, "GetFence");
  return fence.highest_token();
}

absl::StatusOr<uint64_t> NextToken(
    const std::shared_ptr<grpc::Channel>& gateway, const std::string& name,
    absl::Duration timeout) {
  v1::SequenceRequest request;
  request.set_domain(name);
  v1::FenceState fence;
  grpc::ClientContext context;
  SetDeadline(&context, timeout);
  grpc::Status s =
      v1::Gateway::NewStub(gateway)->Sequence(&context, request, &fence);
  if (!s.ok()) return FromGrpc(s, "Sequence");
  return fence.highest_token();
}

}  // namespace fencegate::client::internal
