// Copyright fencegate authors.
//
// Trust end to end (docs/security.md, rules 12-14): a real fencegate
// serving mTLS with a policy. Who may connect, who a caller is, and that
// every RPC of every service passes the policy, which SIGHUP reloads.

#include <signal.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "fencegate/v1/lease.pb.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "security/request_gate.h"
#include "tests/trust_fixture.h"

namespace fencegate {
namespace {

using ::fencegate::testing::CertFiles;
using ::fencegate::testing::ReadFile;
using ::fencegate::testing::TestPki;
using ::fencegate::testing::WaitFor;
using ::fencegate::testing::WriteFileOrDie;
using ::testing::HasSubstr;

class TrustE2eTest : public testing::TrustFixture {
 protected:
  void SetUp() override {
    TrustFixture::SetUp();
    if (HasFatalFailure()) return;
    StartGateway();
  }
};

TEST_F(TrustE2eTest, OnlyCallersWithAGoodCertificateConnect) {
  // The good certificate first: the refusals below are the transport's.
  ASSERT_TRUE(GetFence(Channel(billing_), "billing/x").ok());

  auto plaintext = grpc::CreateChannel(gateway_->address(),
                                       grpc::InsecureChannelCredentials());
  EXPECT_EQ(GetFence(plaintext, "billing/x").error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(GetFence(Channel(CertFiles{}), "billing/x").error_code(),
            grpc::StatusCode::UNAVAILABLE);

  testing::TempDir other_dir;
  ASSERT_OK_AND_ASSIGN(other, TestPki::Create(other_dir.path(), "other-ca"));
  ASSERT_OK_AND_ASSIGN(stranger,
                       other->Issue("billing", "billing",
                                    "URI:" + std::string(testing::kBilling)));
  EXPECT_EQ(GetFence(Channel(stranger), "billing/x").error_code(),
            grpc::StatusCode::UNAVAILABLE);

  ASSERT_OK_AND_ASSIGN(
      expired,
      pki_->Issue("expired", "billing", "URI:" + std::string(testing::kBilling),
                  /*days=*/-1));
  EXPECT_EQ(GetFence(Channel(expired), "billing/x").error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

TEST_F(TrustE2eTest, IdentityIsTheUriSanThenTheDnsSanThenTheCn) {
  EXPECT_TRUE(GetFence(Channel(billing_), "billing/x").ok());   // URI SAN
  EXPECT_TRUE(Fence(Channel(reporter_), "reports/x", 1).ok());  // DNS SAN
  EXPECT_TRUE(GetFence(Channel(admin_), "anything").ok());      // CN
  // A URI SAN wins over a DNS SAN the policy would allow.
  ASSERT_OK_AND_ASSIGN(both,
                       pki_->Issue("both", "admin",
                                   "URI:spiffe://example.org/nobody,DNS:" +
                                       std::string(testing::kReporterDns)));
  grpc::Status uri_first = Fence(Channel(both), "reports/x", 2);
  EXPECT_EQ(uri_first.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(uri_first.error_message(),
              HasSubstr("spiffe://example.org/nobody"));
  // A DNS SAN wins over the CN the policy would allow.
  ASSERT_OK_AND_ASSIGN(
      dns,
      pki_->Issue("dns", "admin", "DNS:" + std::string(testing::kReporterDns)));
  EXPECT_EQ(GetFence(Channel(dns), "anything").error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // A CN spelled like a URI is no identity.
  ASSERT_OK_AND_ASSIGN(
      spelled, pki_->Issue("spelled", std::string(testing::kBilling), ""));
  EXPECT_EQ(GetFence(Channel(spelled), "billing/x").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  // A subject with two CNs and no SAN names nobody, whichever comes first.
  for (const char* subject : {"/CN=admin/CN=nobody", "/CN=nobody/CN=admin"}) {
    ASSERT_OK_AND_ASSIGN(two_cns, pki_->IssueSubject("two_cns", subject, ""));
    EXPECT_EQ(GetFence(Channel(two_cns), "anything").error_code(),
              grpc::StatusCode::UNAUTHENTICATED)
        << subject;
  }
}

// Authorization runs for every method of both services: an identity no rule
// names is refused everything, whatever the request holds.
TEST_F(TrustE2eTest, EveryRpcOfEveryServiceIsDeniedToAnUnknownIdentity) {
  grpc::GenericStub stub(Channel(nobody_));
  int methods = 0;
  std::vector<const google::protobuf::ServiceDescriptor*> services;
  for (const google::protobuf::FileDescriptor* file :
       {v1::WriteRequest::descriptor()->file(),
        v1::AcquireRequest::descriptor()->file()}) {
    for (int i = 0; i < file->service_count(); ++i) {
      services.push_back(file->service(i));
    }
  }
  ASSERT_EQ(services.size(), 2u);
  for (const google::protobuf::ServiceDescriptor* descriptor : services) {
    for (int i = 0; i < descriptor->method_count(); ++i) {
      const std::string method = absl::StrCat("/", descriptor->full_name(), "/",
                                              descriptor->method(i)->name());
      SCOPED_TRACE(method);
      // The one table names it.
      EXPECT_TRUE(PermissionOf(method).has_value());
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
      grpc::ByteBuffer request, response;
      grpc::Slice empty("");
      request = grpc::ByteBuffer(&empty, 1);
      absl::Notification done;
      grpc::Status status;
      stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                     [&](grpc::Status s) {
                       status = std::move(s);
                       done.Notify();
                     });
      done.WaitForNotification();
      EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
          << status.error_message();
      ++methods;
    }
  }
  EXPECT_EQ(methods, 7);
  // Each denial is audited (the writer thread writes within milliseconds).
  auto denied = [&] {
    int n = 0;
    for (const v1::AuditRecord& r : AuditRecords()) {
      n += r.outcome() == "denied" &&
           r.identity() == "spiffe://example.org/nobody";
    }
    return n;
  };
  EXPECT_TRUE(WaitFor([&] { return denied() == methods; }));
  EXPECT_EQ(denied(), methods);
}

TEST_F(TrustE2eTest, ADeniedRequestChangesNothing) {
  auto billing = Channel(billing_);
  // Outside its resources, and outside its domains.
  grpc::Status s =
      Put(billing, "billing/june", 7, "files/reports/june", "forged");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(), HasSubstr("files/reports/june"));
  EXPECT_EQ(Put(billing, "reports/june", 7, "files/billing/june", "forged")
                .error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Fence(billing, "billing/june", 7).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_FALSE(ReadFile(FilePath("reports/june")).ok());
  EXPECT_FALSE(ReadFile(FilePath("billing/june")).ok());
  EXPECT_EQ(Highest("billing/june"), 0u);
  EXPECT_EQ(Highest("reports/june"), 0u);
}

TEST_F(TrustE2eTest, SighupReloadsAGoodPolicyAndKeepsTheOldOneForABadOne) {
  auto reporter = Channel(reporter_);
  ASSERT_EQ(GetFence(reporter, "reports/x").error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  WriteFileOrDie(policy_path_,
                 Policy() + "rule { identities: \"" +
                     std::string(testing::kReporterDns) +
                     "\" domain_prefixes: \"reports/\" permissions: "
                     "GET_FENCE }\n");
  ::kill(gateway_->pid(), SIGHUP);
  EXPECT_TRUE(WaitFor([&] { return GetFence(reporter, "reports/x").ok(); }));

  // A policy that does not validate: refused, the one in force stays.
  WriteFileOrDie(policy_path_,
                 "rule { identities: \"x\" permissions: WRITE }\n");
  ::kill(gateway_->pid(), SIGHUP);
  EXPECT_TRUE(WaitFor([&] {
    absl::StatusOr<std::string> log = ReadFile(gateway_->log_path());
    return log.ok() && absl::StrContains(*log, "policy not reloaded");
  }));
  EXPECT_TRUE(GetFence(reporter, "reports/x").ok());
  EXPECT_TRUE(GetFence(Channel(billing_), "billing/x").ok());
}

// The server's certificate is replaced by one from another CA while a
// client stays connected: the open connection keeps working, and new
// connections get the new certificate, without a restart.
TEST_F(TrustE2eTest, CertificateRotatedWhileAClientStaysConnected) {
  auto connected = Channel(billing_);
  ASSERT_TRUE(GetFence(connected, "billing/x").ok());
  testing::TempDir next_dir;
  ASSERT_OK_AND_ASSIGN(next, TestPki::Create(next_dir.path(), "next-ca"));
  ASSERT_OK_AND_ASSIGN(renewed, next->IssueServer("server"));
  // Over the files the gateway watches, each replaced by a rename.
  ASSERT_EQ(std::rename(renewed.key.c_str(), server_.key.c_str()), 0);
  ASSERT_EQ(std::rename(renewed.cert.c_str(), server_.cert.c_str()), 0);
  EXPECT_TRUE(WaitFor([&] {
    return GetFence(Channel(billing_, next->ca()), "billing/x").ok();
  }));
  EXPECT_EQ(GetFence(Channel(billing_), "billing/x").error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // Trusting only the old CA, this channel could not reconnect: its call
  // succeeding shows the connection was kept.
  EXPECT_TRUE(GetFence(connected, "billing/x").ok());
}

// The client CA bundle is re-read too: clients of a CA added to it connect
// without a restart.
TEST_F(TrustE2eTest, ClientCaBundleRotatedWithoutARestart) {
  testing::TempDir next_dir;
  ASSERT_OK_AND_ASSIGN(next, TestPki::Create(next_dir.path(), "next-ca"));
  ASSERT_OK_AND_ASSIGN(newcomer,
                       next->Issue("billing", "billing",
                                   "URI:" + std::string(testing::kBilling)));
  ASSERT_EQ(GetFence(Channel(newcomer), "billing/x").error_code(),
            grpc::StatusCode::UNAVAILABLE);
  absl::StatusOr<std::string> old_ca = ReadFile(pki_->ca());
  absl::StatusOr<std::string> new_ca = ReadFile(next->ca());
  ASSERT_TRUE(old_ca.ok() && new_ca.ok());
  const std::string bundle = dir_.path() + "/bundle.pem";
  WriteFileOrDie(bundle + ".tmp", *old_ca + *new_ca);
  ASSERT_EQ(std::rename((bundle + ".tmp").c_str(), pki_->ca().c_str()), 0);
  EXPECT_TRUE(
      WaitFor([&] { return GetFence(Channel(newcomer), "billing/x").ok(); }));
  EXPECT_TRUE(GetFence(Channel(billing_), "billing/x").ok());
}

// A CRL directory: a client certificate its CA revoked is refused at the
// handshake while the others connect, and a newer CRL added under the next
// suffix revokes more without a restart. A directory with no CRL for a
// client CA is refused at start-up, naming the CA.
TEST_F(TrustE2eTest, RevokedClientCertificatesAreRefused) {
  const std::string crl_dir = dir_.path() + "/crl";
  ASSERT_TRUE(std::filesystem::create_directory(crl_dir));
  std::vector<std::string> args = TrustFlags();
  args.push_back("--tls_crl_dir=" + crl_dir);
  gateway_.reset();
  absl::StatusOr<std::unique_ptr<testing::GatewayProcess>> refused =
      testing::GatewayProcess::Start(dir_.path() + "/data", args);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(),
              HasSubstr("no CRL for client CA \"/CN=test-ca\""));

  ASSERT_TRUE(pki_->WriteCrl({reporter_.cert}, crl_dir).ok());
  StartGateway({"--tls_crl_dir=" + crl_dir});
  EXPECT_TRUE(GetFence(Channel(billing_), "billing/x").ok());
  // Not PERMISSION_DENIED (the policy's answer to a reporter asking for a
  // fence): the handshake refused the certificate.
  EXPECT_EQ(GetFence(Channel(reporter_), "billing/x").error_code(),
            grpc::StatusCode::UNAVAILABLE);

  ASSERT_TRUE(
      pki_->WriteCrl({reporter_.cert, billing_.cert}, crl_dir, /*suffix=*/1)
          .ok());
  EXPECT_TRUE(WaitFor([&] {
    return GetFence(Channel(billing_), "billing/x").error_code() ==
           grpc::StatusCode::UNAVAILABLE;
  }));
  EXPECT_TRUE(GetFence(Channel(admin_), "billing/x").ok());
}

// Rule 12: revocation reaches every CA of a client's chain. A leaf under
// an intermediate CA that the client sends in its chain is refused while
// the intermediate has no CRL in the directory (gRPC's own check lets it
// through), accepted once it has one, and refused again once the root's
// CRL revokes the intermediate.
TEST_F(TrustE2eTest, RevocationReachesEveryCaOfTheChain) {
  const std::string crl_dir = dir_.path() + "/crl";
  ASSERT_TRUE(std::filesystem::create_directory(crl_dir));
  ASSERT_OK_AND_ASSIGN(intermediate, pki_->IssueCa("intermediate-ca"));
  ASSERT_OK_AND_ASSIGN(leaf, intermediate->Issue("chained", "admin", ""));
  ASSERT_OK_AND_ASSIGN(
      chain, pki_->Chain("chained-chain", leaf, {intermediate->ca()}));
  ASSERT_TRUE(pki_->WriteCrl({}, crl_dir).ok());
  StartGateway({"--tls_crl_dir=" + crl_dir});
  EXPECT_TRUE(GetFence(Channel(admin_), "anything").ok());
  EXPECT_EQ(GetFence(Channel(chain), "anything").error_code(),
            grpc::StatusCode::UNAVAILABLE);
  ASSERT_TRUE(intermediate->WriteCrl({}, crl_dir).ok());
  EXPECT_TRUE(
      WaitFor([&] { return GetFence(Channel(chain), "anything").ok(); }));
  ASSERT_TRUE(pki_->WriteCrl({intermediate->ca()}, crl_dir, /*suffix=*/1).ok());
  EXPECT_TRUE(WaitFor([&] {
    return GetFence(Channel(chain), "anything").error_code() ==
           grpc::StatusCode::UNAVAILABLE;
  }));
  EXPECT_TRUE(GetFence(Channel(admin_), "anything").ok());
  absl::StatusOr<std::string> log = ReadFile(gateway_->log_path());
  ASSERT_TRUE(log.ok());
  EXPECT_THAT(*log, HasSubstr("unable to get certificate CRL"));
}

// SIGHUP reopens the audit log: after the file is renamed away (log
// rotation), new records go to a new file at the configured path.
TEST_F(TrustE2eTest, SighupReopensTheAuditLog) {
  auto nobody = Channel(nobody_);
  ASSERT_EQ(GetFence(nobody, "one").error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_TRUE(WaitFor([&] { return AuditRecords().size() == 1; }));
  const std::string rotated = audit_path_ + ".1";
  ASSERT_EQ(std::rename(audit_path_.c_str(), rotated.c_str()), 0);
  ::kill(gateway_->pid(), SIGHUP);
  ASSERT_TRUE(WaitFor([&] {
    absl::StatusOr<std::string> log = ReadFile(gateway_->log_path());
    return log.ok() && absl::StrContains(*log, "reopening the audit log");
  }));
  // The reopen follows the log line on the same thread: wait for the file.
  ASSERT_TRUE(WaitFor([&] { return ReadFile(audit_path_).ok(); }));
  ASSERT_EQ(GetFence(nobody, "two").error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(WaitFor([&] { return AuditRecords().size() == 1; }));
  std::vector<v1::AuditRecord> records = AuditRecords();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].domain(), "two");
  absl::StatusOr<std::string> old_file = ReadFile(rotated);
  ASSERT_TRUE(old_file.ok());
  EXPECT_THAT(*old_file, HasSubstr("\"one\""));
  EXPECT_THAT(*old_file, ::testing::Not(HasSubstr("\"two\"")));
}

}  // namespace
}  // namespace fencegate
