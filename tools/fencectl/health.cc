// Copyright fencegate authors.

#include "tools/fencectl/health.h"

#include <iostream>

#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "tools/fencectl/exit_codes.h"

namespace fencegate {

int RunHealth(const std::shared_ptr<grpc::Channel>& channel,
              const std::string& route, absl::Duration timeout, bool json) {
  const std::string service =
      route.empty() ? "" : absl::StrCat("route/", route);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::Status status = grpc::health::v1::Health::NewStub(channel)->Check(
      &context, request, &response);
  const std::string what =
      route.empty() ? "gateway" : absl::StrCat("route ", route);
  if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
    std::cerr << "fencectl: no route \"" << route << "\" on the gateway\n";
    return fencectl::kExitInvalid;
  }
  if (!status.ok()) {
    std::cerr << "fencectl: health: " << status.error_message() << "\n";
    return status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                   status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
               ? fencectl::kExitUnavailable
               : fencectl::kExitError;
  }
  const std::string state =
      grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
          response.status());
  if (json) {
    std::cout << "{\"service\":\"" << service << "\",\"status\":\"" << state
              << "\"}\n";
  } else {
    std::cout << what << ": " << state << "\n";
  }
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING
             ? fencectl::kExitOk
             : fencectl::kExitNotServing;
}

}  // namespace fencegate
