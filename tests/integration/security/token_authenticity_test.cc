// Copyright fencegate authors.
//
// Token authenticity end to end (docs/security.md, rule 15): a domain bound
// to the lease service refuses tokens it never granted, max_advance refuses
// tokens far above the fence, a refused token never moves the fence, and
// each refusal, denial and advance leaves an audit record. Also fencectl
// over mTLS and its exit codes for these refusals.

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "fencegate/client/lease_token_source.h"
#include "fencegate/client/run_exclusive.h"
#include "fencegate/common/grpc_status.h"
#include "fencegate/common/token_refused.h"
#include "fencegate/v1/errors.pb.h"
#include "tests/trust_fixture.h"

namespace fencegate {
namespace {

using ::fencegate::testing::RunCommand;
using ::fencegate::testing::WaitFor;
using ::testing::HasSubstr;

class TokenAuthenticityTest : public testing::TrustFixture {
 protected:
  void SetUp() override {
    TrustFixture::SetUp();
    if (HasFatalFailure()) return;
    StartGateway();
  }

  // Acquire on the lease service as `client`; the granted token.
  uint64_t Acquire(const testing::CertFiles& client, const std::string& name,
                   std::string* lease_id = nullptr) {
    v1::AcquireRequest request;
    request.set_name(name);
    request.set_owner("test");
    request.set_ttl_ms(30000);
    v1::AcquireResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    grpc::Status s = v1::Lease::NewStub(Channel(client))
                         ->Acquire(&context, request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_TRUE(response.acquired());
    if (lease_id != nullptr) *lease_id = response.lease_id();
    return response.token();
  }

  static std::optional<v1::TokenRefused> Refusal(const grpc::Status& s) {
    return GetTokenRefused(FromGrpcStatus(s));
  }

  int Fencectl(std::vector<std::string> args, std::string* err = nullptr) {
    std::vector<std::string> argv = {FENCECTL_BIN,
                                     "--addr=" + gateway_->address()};
    argv.insert(argv.end(), args.begin(), args.end());
    std::string out;
    return RunCommand(argv, &out, err);
  }
};

TEST_F(TokenAuthenticityTest, LeaseBoundDomainRefusesTokensItNeverGranted) {
  auto billing = Channel(billing_);
  const uint64_t token = Acquire(billing_, "billing/june");
  ASSERT_GT(token, 0u);
  ASSERT_TRUE(
      Put(billing, "billing/june", token, "files/billing/june", "granted")
          .ok());
  // A buggy worker skips ahead of the real holder.
  grpc::Status forged =
      Put(billing, "billing/june", token + 5, "files/billing/june", "forged");
  EXPECT_EQ(forged.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  std::optional<v1::TokenRefused> refused = Refusal(forged);
  ASSERT_TRUE(refused.has_value()) << forged.error_message();
  EXPECT_EQ(refused->reason(), v1::TokenRefused::NOT_GRANTED_BY_LEASE);
  EXPECT_EQ(refused->token(), token + 5);
  EXPECT_EQ(refused->highest_token(), token);
  EXPECT_EQ(Highest("billing/june"), token);
  EXPECT_EQ(FileText("billing/june"), "granted");
  // Never fenced and never granted: refused too.
  EXPECT_TRUE(
      Refusal(Put(billing, "billing/july", 1, "files/billing/july", "forged"))
          .has_value());
  EXPECT_EQ(Highest("billing/july"), 0u);

  // Fence needs ADMIN on such a domain: even a FENCE rule is not enough
  // (the reporter's FENCE covers reports/ only, the admin's ADMIN all).
  EXPECT_EQ(Fence(Channel(reporter_), "billing/june", token + 1).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_TRUE(Fence(Channel(admin_), "billing/june", token + 10).ok());
  EXPECT_EQ(Highest("billing/june"), token + 10);
}

TEST_F(TokenAuthenticityTest, MaxAdvanceRefusesTokensFarAboveTheFence) {
  auto reporter = Channel(reporter_);
  // The first token of a domain never fenced is not limited.
  ASSERT_TRUE(Put(reporter, "reports/q1", 5000, "files/reports/q1", "a").ok());
  grpc::Status far =
      Put(reporter, "reports/q1", 6001, "files/reports/q1", "far");
  std::optional<v1::TokenRefused> refused = Refusal(far);
  ASSERT_TRUE(refused.has_value()) << far.error_message();
  EXPECT_EQ(refused->reason(), v1::TokenRefused::ABOVE_MAX_ADVANCE);
  EXPECT_EQ(refused->limit(), 6000u);
  EXPECT_TRUE(Refusal(Fence(reporter, "reports/q1", UINT64_MAX)).has_value());
  EXPECT_EQ(Highest("reports/q1"), 5000u);
  EXPECT_EQ(FileText("reports/q1"), "a");
  ASSERT_TRUE(Put(reporter, "reports/q1", 6000, "files/reports/q1", "b").ok());
  EXPECT_EQ(Highest("reports/q1"), 6000u);
}

TEST_F(TokenAuthenticityTest, AuditRecordsDenialsRefusalsAndAdvances) {
  auto billing = Channel(billing_);
  const uint64_t token = Acquire(billing_, "billing/audit");
  ASSERT_TRUE(Put(billing, "billing/audit", token + 1, "files/billing/a", "x",
                  "req-refused")
                  .error_code() == grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_EQ(
      Put(billing, "billing/audit", token, "files/reports/a", "x", "req-denied")
          .error_code(),
      grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_TRUE(
      Put(Channel(reporter_), "reports/a", 3, "files/reports/a", "x", "req-ok")
          .ok());
  // An advance whose write then fails (the path is a directory) is an
  // advance all the same.
  ASSERT_TRUE(
      Put(Channel(reporter_), "reports/dir", 4, "files/reports/dir/f", "x")
          .ok());
  ASSERT_EQ(Put(Channel(reporter_), "reports/dir", 5, "files/reports/dir", "x",
                "req-failed")
                .error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  ASSERT_EQ(Highest("reports/dir"), 5u);
  auto find = [&](const std::string& outcome, const std::string& request_id) {
    for (const v1::AuditRecord& r : AuditRecords()) {
      if (r.outcome() == outcome && r.request_id() == request_id) return r;
    }
    return v1::AuditRecord();
  };
  ASSERT_TRUE(WaitFor(
      [&] { return find("fence_advanced", "req-failed").outcome() != ""; }));
  EXPECT_EQ(find("fence_advanced", "req-failed").token(), 5u);
  const v1::AuditRecord refused = find("token_refused", "req-refused");
  EXPECT_EQ(refused.identity(), testing::kBilling);
  EXPECT_EQ(refused.rpc(), "/fencegate.v1.Gateway/Write");
  EXPECT_EQ(refused.domain(), "billing/audit");
  EXPECT_EQ(refused.token(), token + 1);
  EXPECT_EQ(refused.resource(), "files/billing/a");
  EXPECT_THAT(refused.reason(), HasSubstr("lease service"));
  EXPECT_GT(refused.time().seconds(), 0);
  const v1::AuditRecord denied = find("denied", "req-denied");
  EXPECT_EQ(denied.identity(), testing::kBilling);
  EXPECT_EQ(denied.resource(), "files/reports/a");
  EXPECT_THAT(denied.reason(), HasSubstr("may not WRITE"));
  const v1::AuditRecord advanced = find("fence_advanced", "req-ok");
  EXPECT_EQ(advanced.identity(), testing::kReporterDns);
  EXPECT_EQ(advanced.domain(), "reports/a");
  EXPECT_EQ(advanced.token(), 3u);
  // The lease grant's advance, by the lease service's caller.
  bool granted = false;
  for (const v1::AuditRecord& r : AuditRecords()) {
    granted |= r.outcome() == "fence_advanced" &&
               r.rpc() == "/fencegate.v1.Lease/Acquire" &&
               r.domain() == "billing/audit" && r.token() == token;
  }
  EXPECT_TRUE(granted);
}

// The client library over mTLS: LeaseTokenSource on a channel made from
// client::ChannelCredentials, under RunExclusive.
TEST_F(TokenAuthenticityTest, TheClientLibraryHoldsLocksOverMtls) {
  auto channel = Channel(billing_);
  client::LeaseTokenSource source(channel);
  uint64_t held = 0;
  absl::Status s = client::RunExclusive(
      source, "billing/run", {}, [&](const client::LockContext& lock) {
        held = lock.token;
        grpc::Status put =
            Put(channel, lock.name, lock.token, "files/billing/run", "once");
        return put.ok() ? absl::OkStatus()
                        : absl::InternalError(put.error_message());
      });
  ASSERT_OK(s);
  EXPECT_GT(held, 0u);
  EXPECT_EQ(Highest("billing/run"), held);
  EXPECT_EQ(FileText("billing/run"), "once");
  // An identity without LEASE on the name cannot take it.
  client::LeaseTokenSource denied(Channel(reporter_));
  absl::StatusOr<std::unique_ptr<client::HeldLock>> lock =
      denied.Acquire("billing/run", {}, [] {});
  EXPECT_EQ(lock.status().code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(TokenAuthenticityTest, FencectlSpeaksMtlsAndNamesRefusalsByExitCode) {
  const std::vector<std::string> tls = {"--tls_ca=" + pki_->ca(),
                                        "--tls_cert=" + reporter_.cert,
                                        "--tls_key=" + reporter_.key};
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.begin(), tls.begin(), tls.end());
    return args;
  };
  EXPECT_EQ(Fencectl(with({"write", "--domain=reports/c", "--token=10",
                           "--resource=files/reports/c", "--put=ok"})),
            0);
  EXPECT_EQ(FileText("reports/c"), "ok");
  std::string err;
  EXPECT_EQ(Fencectl(with({"write", "--domain=reports/c", "--token=5000",
                           "--resource=files/reports/c", "--put=far"}),
                     &err),
            8)
      << err;
  EXPECT_EQ(Fencectl(with({"fence", "--domain=billing/c", "--token=3"}), &err),
            7)
      << err;
  EXPECT_EQ(Fencectl(with({"write", "--domain=reports/c", "--token=9",
                           "--resource=files/reports/c", "--put=old"})),
            3);
  // Without a client certificate the gateway is out of reach.
  EXPECT_EQ(Fencectl({"--tls_ca=" + pki_->ca(), "--timeout=3", "get",
                      "--domain=reports/c"}),
            5);
  // The same files from the environment.
  std::vector<std::string> argv = {"/usr/bin/env",
                                   "FENCEGATE_TLS_CA=" + pki_->ca(),
                                   "FENCEGATE_TLS_CERT=" + admin_.cert,
                                   "FENCEGATE_TLS_KEY=" + admin_.key,
                                   FENCECTL_BIN,
                                   "--addr=" + gateway_->address(),
                                   "get",
                                   "--domain=reports/c"};
  std::string out;
  EXPECT_EQ(RunCommand(argv, &out), 0);
  EXPECT_THAT(out, HasSubstr("highest_token=10"));
  EXPECT_EQ(FileText("reports/c"), "ok");
}

}  // namespace
}  // namespace fencegate
