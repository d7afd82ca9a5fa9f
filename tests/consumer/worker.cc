// Copyright fencegate authors.
//
// A worker built against the installed package: takes lock "consumer/job"
// from the gateway's lease service, writes `text` to files/consumer.txt
// with the lock's token, and prints the token.
//
//   worker GATEWAY_ADDRESS TEXT

#include <iostream>
#include <memory>
#include <string>

#include "fencegate/client/lease_token_source.h"
#include "fencegate/client/run_exclusive.h"
#include "fencegate/v1/gateway.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: worker GATEWAY_ADDRESS TEXT\n";
    return 2;
  }
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(argv[1], grpc::InsecureChannelCredentials());
  fencegate::client::LeaseTokenSource source(channel);
  auto stub = fencegate::v1::Gateway::NewStub(channel);
  absl::Status status = fencegate::client::RunExclusive(
      source, "consumer/job", {},
      [&](const fencegate::client::LockContext& lock) -> absl::Status {
        fencegate::v1::WriteRequest request;
        request.set_domain(lock.name);
        request.set_token(lock.token);
        request.set_resource("files/consumer.txt");
        request.add_ops()->mutable_put()->set_data(argv[2]);
        fencegate::v1::WriteResponse response;
        grpc::ClientContext context;
        grpc::Status s = stub->Write(&context, request, &response);
        if (!s.ok()) return absl::UnavailableError(s.error_message());
        std::cout << lock.token << "\n";
        return absl::OkStatus();
      });
  if (!status.ok()) {
    std::cerr << "worker: " << status << "\n";
    return 1;
  }
  return 0;
}
