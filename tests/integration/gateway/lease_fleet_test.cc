// Copyright fencegate authors.
//
// A fleet of gateways serves no LEASE-bound domain (gateway/fleet_watch.h,
// docs/token-sources.md): two gateways on one file root, with a policy that
// binds billing/ to LEASE. Alone, a gateway grants and writes; once another
// shares its root, both refuse the domain's grants and writes, naming what
// to use instead, while other domains are served; once the other is killed,
// the first serves again.

#include <signal.h>

#include <memory>
#include <string>
#include <vector>

#include "fencegate/client/tls.h"
#include "tests/trust_fixture.h"

namespace fencegate {
namespace {

using ::fencegate::testing::WaitFor;
using ::testing::HasSubstr;

class LeaseFleetTest : public testing::TrustFixture {
 protected:
  std::string Root() const { return dir_.path() + "/shared"; }

  // A channel to `address` presenting `client`.
  std::shared_ptr<grpc::Channel> ChannelTo(
      const std::string& address, const testing::CertFiles& client) const {
    client::TlsFiles tls{pki_->ca(), client.cert, client.key};
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds =
        client::ChannelCredentials(tls);
    EXPECT_TRUE(creds.ok()) << creds.status();
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return grpc::CreateCustomChannel(address, *creds, args);
  }

  static grpc::Status Acquire(const std::shared_ptr<grpc::Channel>& channel,
                              const std::string& name, uint64_t* token) {
    v1::AcquireRequest request;
    request.set_name(name);
    request.set_owner("test");
    request.set_ttl_ms(30000);
    v1::AcquireResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    grpc::Status s =
        v1::Lease::NewStub(channel)->Acquire(&context, request, &response);
    *token = response.token();
    return s;
  }
};

TEST_F(LeaseFleetTest, AFleetServesNoLeaseBoundDomain) {
  StartGateway({"--route=files=file://" + Root()});
  auto billing_a = Channel(billing_);
  uint64_t token = 0;
  ASSERT_TRUE(Acquire(billing_a, "billing/june", &token).ok());
  ASSERT_TRUE(
      Put(billing_a, "billing/june", token, "files/billing/june", "one").ok());

  std::vector<std::string> args = TrustFlags();
  args.push_back("--route=files=file://" + Root());
  auto b = testing::GatewayProcess::Start(dir_.path() + "/b", args);
  ASSERT_TRUE(b.ok()) << b.status();
  auto billing_b = ChannelTo((*b)->address(), billing_);
  uint64_t refused_token = 0;
  grpc::Status refused = Acquire(billing_b, "billing/june", &refused_token);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(refused.error_message(), HasSubstr("bound to LEASE"));
  EXPECT_THAT(refused.error_message(), HasSubstr("ETCD or ZOOKEEPER"));
  EXPECT_EQ(refused_token, 0u);
  // The first gateway sees the second at its next count, and then refuses
  // its own holder's writes too.
  EXPECT_TRUE(WaitFor([&] {
    return Put(billing_a, "billing/june", token, "files/billing/june", "two")
               .error_code() == grpc::StatusCode::FAILED_PRECONDITION;
  }));
  // Domains not bound to LEASE are served by both.
  EXPECT_TRUE(Put(ChannelTo((*b)->address(), reporter_), "reports/daily", 1,
                  "files/reports/daily", "r")
                  .ok());
  // The second gateway dies without a word: the first serves again.
  (*b)->Stop(SIGKILL);
  EXPECT_TRUE(WaitFor([&] {
    return Put(billing_a, "billing/june", token, "files/billing/june", "three")
        .ok();
  }));
  absl::StatusOr<std::string> text =
      testing::ReadFile(Root() + "/billing/june");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "three");
}

}  // namespace
}  // namespace fencegate
