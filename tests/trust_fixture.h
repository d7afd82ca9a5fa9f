// Copyright fencegate authors.
//
// TrustFixture: a gateway serving mTLS with a policy and an audit log, a CA
// made at test time, and certificates for the identities the tests use.

#ifndef TESTS_TRUST_FIXTURE_H_
#define TESTS_TRUST_FIXTURE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "fencegate/client/tls.h"
#include "fencegate/v1/audit.pb.h"
#include "fencegate/v1/gateway.grpc.pb.h"
#include "fencegate/v1/lease.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "tests/json_lines.h"
#include "tests/test_certs.h"
#include "tests/test_util.h"

namespace fencegate::testing {

inline constexpr char kBilling[] = "spiffe://example.org/billing-worker";
inline constexpr char kReporterDns[] = "reporter.example.org";

class TrustFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(pki, TestPki::Create(dir_.path()));
    pki_ = std::move(pki);
    ASSERT_OK_AND_ASSIGN(server, pki_->IssueServer("server"));
    server_ = server;
    ASSERT_OK_AND_ASSIGN(billing, pki_->Issue("billing", "billing",
                                              "URI:" + std::string(kBilling)));
    billing_ = billing;
    ASSERT_OK_AND_ASSIGN(reporter,
                         pki_->Issue("reporter", "reporter",
                                     "DNS:" + std::string(kReporterDns)));
    reporter_ = reporter;
    ASSERT_OK_AND_ASSIGN(admin, pki_->Issue("admin", "admin", ""));
    admin_ = admin;
    ASSERT_OK_AND_ASSIGN(
        nobody,
        pki_->Issue("nobody", "nobody", "URI:spiffe://example.org/nobody"));
    nobody_ = nobody;
    policy_path_ = dir_.path() + "/policy.textproto";
    audit_path_ = dir_.path() + "/audit.log";
    WriteFileOrDie(policy_path_, Policy());
  }

  // The policy every test starts with.
  virtual std::string Policy() const {
    return absl::StrReplaceAll(
        R"(
      rule {
        identities: "$BILLING"
        domain_prefixes: "billing/"
        resource_prefixes: "files/billing/"
        permissions: [ WRITE, LEASE, GET_FENCE ]
      }
      rule {
        identities: "$REPORTER"
        domain_prefixes: "reports/"
        resource_prefixes: "files/reports/"
        permissions: [ WRITE, FENCE ]
      }
      rule {
        identities: "admin"
        domain_prefixes: ""
        permissions: [ ADMIN, GET_FENCE ]
      }
      domain { prefix: "billing/" token_source: LEASE }
      domain { prefix: "reports/" max_advance: 1000 }
    )",
        {{"$BILLING", kBilling}, {"$REPORTER", kReporterDns}});
  }

  // The flags of an mTLS gateway with the policy and the audit log.
  std::vector<std::string> TrustFlags() const {
    return {"--tls_cert=" + server_.cert,    "--tls_key=" + server_.key,
            "--tls_client_ca=" + pki_->ca(), "--tls_refresh_seconds=1",
            "--policy=" + policy_path_,      "--audit_log=" + audit_path_};
  }

  void StartGateway(std::vector<std::string> extra = {}, int stderr_fd = -1) {
    std::vector<std::string> args = TrustFlags();
    args.insert(args.end(), extra.begin(), extra.end());
    gateway_.reset();
    auto gateway =
        GatewayProcess::Start(dir_.path() + "/data", args, stderr_fd);
    ASSERT_TRUE(gateway.ok()) << gateway.status();
    gateway_ = *std::move(gateway);
  }

  // A new channel presenting `client` (none if empty), trusting `ca`
  // (the test CA if empty).
  std::shared_ptr<grpc::Channel> Channel(const CertFiles& client,
                                         std::string ca = "") const {
    client::TlsFiles tls{ca.empty() ? pki_->ca() : ca, client.cert, client.key};
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds =
        client::ChannelCredentials(tls);
    EXPECT_TRUE(creds.ok()) << creds.status();
    grpc::ChannelArguments args;
    // A separate connection per channel, so that each makes its own
    // handshake with its own certificate.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return grpc::CreateCustomChannel(gateway_->address(), *creds, args);
  }

  static grpc::Status GetFence(const std::shared_ptr<grpc::Channel>& channel,
                               const std::string& domain,
                               v1::FenceState* state = nullptr) {
    v1::GetFenceRequest request;
    request.set_domain(domain);
    v1::FenceState local;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    return v1::Gateway::NewStub(channel)->GetFence(&context, request,
                                                   state ? state : &local);
  }
  static grpc::Status Fence(const std::shared_ptr<grpc::Channel>& channel,
                            const std::string& domain, uint64_t token) {
    v1::FenceRequest request;
    request.set_domain(domain);
    request.set_token(token);
    v1::FenceState state;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    return v1::Gateway::NewStub(channel)->Fence(&context, request, &state);
  }
  static grpc::Status Put(const std::shared_ptr<grpc::Channel>& channel,
                          const std::string& domain, uint64_t token,
                          const std::string& resource, const std::string& data,
                          const std::string& request_id = "") {
    v1::WriteRequest request;
    request.set_domain(domain);
    request.set_token(token);
    request.set_resource(resource);
    request.set_request_id(request_id);
    request.add_ops()->mutable_put()->set_data(data);
    v1::WriteResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    return v1::Gateway::NewStub(channel)->Write(&context, request, &response);
  }

  // The fence as the admin sees it.
  uint64_t Highest(const std::string& domain) {
    v1::FenceState state;
    grpc::Status s = GetFence(Channel(admin_), domain, &state);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return state.highest_token();
  }

  std::string FilePath(const std::string& rel) const {
    return dir_.path() + "/data/files/" + rel;
  }
  // The file's contents, or "(missing)".
  std::string FileText(const std::string& rel) const {
    absl::StatusOr<std::string> text = ReadFile(FilePath(rel));
    return text.ok() ? *text : "(missing)";
  }

  // The audit log's records so far.
  std::vector<v1::AuditRecord> AuditRecords() const {
    absl::StatusOr<std::string> text = ReadFile(audit_path_);
    if (!text.ok()) return {};
    return ParseJsonLines<v1::AuditRecord>(*text);
  }

  TempDir dir_;
  std::unique_ptr<TestPki> pki_;
  CertFiles server_, billing_, reporter_, admin_, nobody_;
  std::string policy_path_, audit_path_;
  std::unique_ptr<GatewayProcess> gateway_;
};

}  // namespace fencegate::testing

#endif  // TESTS_TRUST_FIXTURE_H_
