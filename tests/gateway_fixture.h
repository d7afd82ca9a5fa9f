// Copyright fencegate authors.
//
// GatewayFixture: a plaintext gateway process on loopback and a channel to
// it, for the token source tests, which check the fence their grants raise.

#ifndef TESTS_GATEWAY_FIXTURE_H_
#define TESTS_GATEWAY_FIXTURE_H_

#include <memory>
#include <string>

#include "fencegate/v1/gateway.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "tests/test_util.h"

namespace fencegate::testing {

class GatewayFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    auto gateway = GatewayProcess::Start(dir_.path() + "/data");
    ASSERT_TRUE(gateway.ok()) << gateway.status();
    gateway_ = *std::move(gateway);
    channel_ = grpc::CreateChannel(gateway_->address(),
                                   grpc::InsecureChannelCredentials());
  }

  // The domain's fence.
  uint64_t Highest(const std::string& domain) {
    v1::GetFenceRequest request;
    request.set_domain(domain);
    v1::FenceState state;
    grpc::ClientContext context;
    EXPECT_TRUE(v1::Gateway::NewStub(channel_)
                    ->GetFence(&context, request, &state)
                    .ok());
    return state.highest_token();
  }

  TempDir dir_;
  std::unique_ptr<GatewayProcess> gateway_;
  std::shared_ptr<grpc::Channel> channel_;
};

}  // namespace fencegate::testing

#endif  // TESTS_GATEWAY_FIXTURE_H_
