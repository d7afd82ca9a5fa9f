// Copyright fencegate authors.
//
// etcd over TLS, and domains bound to etcd (docs/security.md, rule 15): an
// etcd started with --client-cert-auth; workers lock through EtcdTokenSource
// and `fencectl lock` over TLS; the gateway's watcher follows the locks over
// TLS; and only the lock holder's token advances a domain bound to etcd: a
// token from the future, or a real revision that is not the holder's, is
// refused, and the lease service does not grant such a domain.

#include <memory>
#include <string>

#include "fencegate/client/etcd/etcd_token_source.h"
#include "fencegate/common/grpc_status.h"
#include "fencegate/common/token_refused.h"
#include "fencegate/v1/errors.pb.h"
#include "tests/etcd_server.h"
#include "tests/trust_fixture.h"

namespace fencegate {
namespace {

using ::fencegate::testing::CertFiles;
using ::fencegate::testing::EtcdServer;
using ::fencegate::testing::RunCommand;
using ::fencegate::testing::WaitFor;
using ::testing::HasSubstr;

class TrustEtcdTest : public testing::TrustFixture {
 protected:
  std::string Policy() const override {
    return TrustFixture::Policy() + R"pb(
      rule {
        identities: "etcd-worker"
        domain_prefixes: "etcd/"
        resource_prefixes: "files/etcd/"
        permissions: [ WRITE, GET_FENCE, LEASE ]
      }
      domain { prefix: "etcd/" token_source: ETCD }
    )pb";
  }

  void SetUp() override {
    TrustFixture::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_OK_AND_ASSIGN(etcd_cert, pki_->IssueServer("etcd"));
    ASSERT_OK_AND_ASSIGN(etcd_client, pki_->Issue("etcd-client", "root", ""));
    ASSERT_OK_AND_ASSIGN(worker, pki_->Issue("worker", "etcd-worker", ""));
    etcd_client_ = etcd_client;
    worker_ = worker;
    auto etcd = EtcdServer::Start(
        testing::EtcdTls{pki_->ca(), etcd_cert.cert, etcd_cert.key,
                         etcd_client.cert, etcd_client.key});
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = *std::move(etcd);
    StartGateway({"--etcd_endpoint=https://" + etcd_->endpoint(),
                  "--etcd_tls_ca=" + pki_->ca(),
                  "--etcd_tls_cert=" + etcd_client_.cert,
                  "--etcd_tls_key=" + etcd_client_.key});
  }

  absl::StatusOr<std::unique_ptr<client::EtcdTokenSource>> Source(bool tls) {
    client::EtcdTokenSourceOptions options;
    options.endpoint = etcd_->endpoint();
    options.rpc_timeout = absl::Seconds(3);
    if (tls) options.tls = {pki_->ca(), etcd_client_.cert, etcd_client_.key};
    return client::EtcdTokenSource::Create(options);
  }

  CertFiles etcd_client_, worker_;
  std::unique_ptr<EtcdServer> etcd_;
};

TEST_F(TrustEtcdTest, TokensFromEtcdOverTlsAndNotFromTheFuture) {
  // Plaintext cannot reach this etcd.
  ASSERT_OK_AND_ASSIGN(plain, Source(false));
  client::LockOptions quick;
  quick.wait = absl::Seconds(1);
  EXPECT_FALSE(plain->Acquire("etcd/jobs", quick, [] {}).ok());

  ASSERT_OK_AND_ASSIGN(source, Source(true));
  ASSERT_OK_AND_ASSIGN(lock, source->Acquire("etcd/jobs", {}, [] {}));
  const uint64_t token = lock->token();
  // The gateway's watcher, over TLS, raises the fence on the handover.
  EXPECT_TRUE(WaitFor([&] { return Highest("etcd/jobs") == token; }));

  auto worker = Channel(worker_);
  ASSERT_TRUE(Put(worker, "etcd/jobs", token, "files/etcd/jobs", "ok").ok());
  grpc::Status future =
      Put(worker, "etcd/jobs", token + 1000000, "files/etcd/jobs", "forged");
  std::optional<v1::TokenRefused> refused =
      GetTokenRefused(FromGrpcStatus(future));
  ASSERT_TRUE(refused.has_value()) << future.error_message();
  EXPECT_EQ(refused->reason(), v1::TokenRefused::ABOVE_ETCD_REVISION);
  EXPECT_GE(refused->limit(), token);
  EXPECT_LT(refused->limit(), token + 1000000);
  EXPECT_EQ(Highest("etcd/jobs"), token);

  // A real revision, but not a lock holder's token: a key outside the lock
  // prefix, and a waiter's key behind the holder's.
  ASSERT_OK_AND_ASSIGN(elsewhere, etcd_->Put("elsewhere/key", "v"));
  refused = GetTokenRefused(
      FromGrpcStatus(Put(worker, "etcd/other", static_cast<uint64_t>(elsewhere),
                         "files/etcd/other", "forged")));
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->reason(), v1::TokenRefused::NOT_ETCD_HOLDER);
  EXPECT_EQ(refused->limit(), 0u);  // Nobody holds etcd/other.

  // A holder writing at once, maybe before the watcher raised its fence:
  // admitted either way.
  ASSERT_OK_AND_ASSIGN(holder,
                       etcd_->Put("fencegate/locks/etcd/direct/a", "holder"));
  ASSERT_TRUE(Put(worker, "etcd/direct", static_cast<uint64_t>(holder),
                  "files/etcd/direct", "holder")
                  .ok());
  ASSERT_OK_AND_ASSIGN(waiter,
                       etcd_->Put("fencegate/locks/etcd/direct/b", "waiter"));
  refused = GetTokenRefused(
      FromGrpcStatus(Put(worker, "etcd/direct", static_cast<uint64_t>(waiter),
                         "files/etcd/direct", "waiter")));
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->reason(), v1::TokenRefused::NOT_ETCD_HOLDER);
  EXPECT_EQ(refused->limit(), static_cast<uint64_t>(holder));
  EXPECT_EQ(Highest("etcd/direct"), static_cast<uint64_t>(holder));
  EXPECT_EQ(FileText("etcd/direct"), "holder");

  // The lease service does not grant a domain bound to etcd.
  v1::AcquireRequest acquire;
  acquire.set_name("etcd/jobs");
  acquire.set_ttl_ms(10000);
  v1::AcquireResponse acquired;
  grpc::ClientContext context;
  EXPECT_EQ(v1::Lease::NewStub(Channel(worker_))
                ->Acquire(&context, acquire, &acquired)
                .error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Highest("etcd/jobs"), token);
  ASSERT_OK(lock->Release());
}

TEST_F(TrustEtcdTest, FencectlLockTakesTheLockFromEtcdOverTls) {
  // The command takes its token from the environment fencectl lock sets.
  const std::string command = absl::StrCat(
      FENCECTL_BIN, " --tls_ca=", pki_->ca(), " --tls_cert=", worker_.cert,
      " --tls_key=", worker_.key,
      " write --domain=\"$FENCEGATE_DOMAIN\" --token=\"$FENCEGATE_TOKEN\" "
      "--resource=files/etcd/nightly --put=done");
  const std::vector<std::string> argv = {
      FENCECTL_BIN,
      "--addr=" + gateway_->address(),
      "lock",
      "--etcd_endpoint=https://" + etcd_->endpoint(),
      "--etcd_tls_ca=" + pki_->ca(),
      "--etcd_tls_cert=" + etcd_client_.cert,
      "--etcd_tls_key=" + etcd_client_.key,
      "etcd/nightly",
      "--",
      "/bin/sh",
      "-c",
      command};
  std::string out, err;
  EXPECT_EQ(RunCommand(argv, &out, &err), 0) << err;
  EXPECT_THAT(out, HasSubstr("ok:"));
  EXPECT_EQ(FileText("etcd/nightly"), "done");
}

}  // namespace
}  // namespace fencegate
