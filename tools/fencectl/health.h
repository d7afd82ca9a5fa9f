// Copyright fencegate authors.
//
// `fencectl health [--route=NAME]`: asks the gateway's standard gRPC health
// service for the gateway's overall status, or for one route's storage
// ("route/NAME"), prints it, and exits 0 if SERVING, 9 if NOT_SERVING,
// 4 for an unknown route, 5 if the gateway cannot be reached.

#ifndef TOOLS_FENCECTL_HEALTH_H_
#define TOOLS_FENCECTL_HEALTH_H_

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "grpcpp/channel.h"

namespace fencegate {

int RunHealth(const std::shared_ptr<grpc::Channel>& channel,
              const std::string& route, absl::Duration timeout, bool json);

}  // namespace fencegate

#endif  // TOOLS_FENCECTL_HEALTH_H_
