// Copyright fencegate authors.

#include "fencegate/common/grpc_status.h"

#include <string>

#include "absl/strings/cord.h"
#include "google/rpc/status.pb.h"

namespace fencegate {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  auto code = static_cast<grpc::StatusCode>(status.code());
  std::string message(status.message());
  google::rpc::Status rich;
  status.ForEachPayload(
      [&rich](absl::string_view type_url, const absl::Cord& payload) {
        google::protobuf::Any* any = rich.add_details();
        any->set_type_url(std::string(type_url));
        any->set_value(std::string(payload));
      });
  if (rich.details_size() == 0) return grpc::Status(code, message);
  rich.set_code(static_cast<int>(code));
  rich.set_message(message);
  return grpc::Status(code, message, rich.SerializeAsString());
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  absl::Status out(static_cast<absl::StatusCode>(status.error_code()),
                   status.error_message());
  google::rpc::Status rich;
  if (!status.error_details().empty() &&
      rich.ParseFromString(status.error_details())) {
    for (const google::protobuf::Any& any : rich.details()) {
      out.SetPayload(any.type_url(), absl::Cord(any.value()));
    }
  }
  return out;
}

}  // namespace fencegate
