// Copyright fencegate authors.
//
// A gateway following ZooKeeper locks (--zookeeper_endpoint), with domains
// bound to ZOOKEEPER (docs/security.md, "Token authenticity"): the watcher
// raises a lock's fence to its holder's czxid on every handover, before the
// holder writes; only the holder's czxid advances such a domain -- a token
// above the newest zxid, or a real zxid that is not the holder's, is
// refused -- and the lease service does not grant it. Each refusal and each
// advance is in the audit log.

#include <memory>
#include <string>

#include "fencegate/common/grpc_status.h"
#include "fencegate/common/token_refused.h"
#include "fencegate/v1/errors.pb.h"
#include "tests/trust_fixture.h"
#include "tests/zookeeper_locks.h"
#include "tests/zookeeper_server.h"

namespace fencegate {
namespace {

using ::fencegate::testing::CertFiles;
using ::fencegate::testing::LockZnode;
using ::fencegate::testing::WaitFor;
using ::fencegate::testing::ZooKeeperServer;

class TrustZooKeeperTest : public testing::TrustFixture {
 protected:
  std::string Policy() const override {
    return TrustFixture::Policy() + R"pb(
      rule {
        identities: "zk-worker"
        domain_prefixes: "zk/"
        resource_prefixes: "files/zk/"
        permissions: [ WRITE, GET_FENCE, LEASE ]
      }
      domain { prefix: "zk/" token_source: ZOOKEEPER }
    )pb";
  }

  void SetUp() override {
    TrustFixture::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_OK_AND_ASSIGN(worker, pki_->Issue("worker", "zk-worker", ""));
    worker_ = worker;
    ASSERT_OK_AND_ASSIGN(zookeeper, ZooKeeperServer::Start());
    zookeeper_ = std::move(zookeeper);
    StartGateway({"--zookeeper_endpoint=" + zookeeper_->endpoint(),
                  "--zookeeper_lock_path=/locks"});
  }

  absl::StatusOr<std::unique_ptr<LockZnode>> Lock(const std::string& name) {
    return LockZnode::Create(zookeeper_->endpoint(), "/locks/" + name);
  }

  std::optional<v1::TokenRefused> Refused(const std::string& domain,
                                          uint64_t token) {
    grpc::Status s =
        Put(Channel(worker_), domain, token, "files/" + domain, "forged");
    std::optional<v1::TokenRefused> refused =
        GetTokenRefused(FromGrpcStatus(s));
    EXPECT_TRUE(refused.has_value()) << s.error_message();
    return refused;
  }

  CertFiles worker_;
  std::unique_ptr<ZooKeeperServer> zookeeper_;
};

TEST_F(TrustZooKeeperTest, TheWatcherRaisesTheFenceOnEveryHandover) {
  ASSERT_OK_AND_ASSIGN(first, Lock("zk/jobs"));
  ASSERT_OK_AND_ASSIGN(second, Lock("zk/jobs"));
  // Nobody called Fence: the watcher did, and not for the waiter.
  ASSERT_TRUE(WaitFor([&] { return Highest("zk/jobs") == first->czxid(); }));
  auto worker = Channel(worker_);
  ASSERT_TRUE(
      Put(worker, "zk/jobs", first->czxid(), "files/zk/jobs", "first").ok());
  ASSERT_OK(first->Delete());
  ASSERT_TRUE(WaitFor([&] { return Highest("zk/jobs") == second->czxid(); }));
  // The first holder, paused through the handover, is shut out.
  grpc::Status late =
      Put(worker, "zk/jobs", first->czxid(), "files/zk/jobs", "late");
  EXPECT_EQ(late.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(FileText("zk/jobs"), "first");

  // The audit log is written by its own thread, after the fence advanced.
  EXPECT_TRUE(WaitFor([&] {
    for (const v1::AuditRecord& record : AuditRecords()) {
      if (record.identity() == "zookeeper-watcher" &&
          record.domain() == "zk/jobs" && record.token() == second->czxid() &&
          record.outcome() == "fence_advanced") {
        return true;
      }
    }
    return false;
  }));
}

TEST_F(TrustZooKeeperTest, OnlyTheHoldersCzxidAdvancesTheFence) {
  ASSERT_OK_AND_ASSIGN(holder, Lock("zk/direct"));
  ASSERT_OK_AND_ASSIGN(waiter, Lock("zk/direct"));
  auto worker = Channel(worker_);
  // The holder writing at once, maybe before the watcher raised its fence:
  // admitted either way.
  ASSERT_TRUE(
      Put(worker, "zk/direct", holder->czxid(), "files/zk/direct", "holder")
          .ok());

  // A token from the future: above every zxid ZooKeeper has made.
  std::optional<v1::TokenRefused> refused =
      Refused("zk/direct", holder->czxid() + 1000000);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->reason(), v1::TokenRefused::ABOVE_ZOOKEEPER_ZXID);
  EXPECT_GE(refused->limit(), waiter->czxid());
  EXPECT_LT(refused->limit(), holder->czxid() + 1000000);

  // A real zxid, but a waiter's.
  refused = Refused("zk/direct", waiter->czxid());
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->reason(), v1::TokenRefused::NOT_ZOOKEEPER_HOLDER);
  EXPECT_EQ(refused->limit(), holder->czxid());

  // A real zxid of a lock nobody holds.
  refused = Refused("zk/other", holder->czxid());
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->reason(), v1::TokenRefused::NOT_ZOOKEEPER_HOLDER);
  EXPECT_EQ(refused->limit(), 0u);

  EXPECT_EQ(Highest("zk/direct"), holder->czxid());
  EXPECT_EQ(Highest("zk/other"), 0u);
  EXPECT_EQ(FileText("zk/direct"), "holder");
  EXPECT_EQ(FileText("zk/other"), "(missing)");

  // The lease service does not grant a domain bound to ZooKeeper.
  v1::AcquireRequest acquire;
  acquire.set_name("zk/direct");
  acquire.set_ttl_ms(10000);
  v1::AcquireResponse acquired;
  grpc::ClientContext context;
  grpc::Status denied =
      v1::Lease::NewStub(worker)->Acquire(&context, acquire, &acquired);
  EXPECT_EQ(denied.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(denied.error_message(), ::testing::HasSubstr("zookeeper"));
  EXPECT_EQ(Highest("zk/direct"), holder->czxid());
}

TEST_F(TrustZooKeeperTest, AGatewayStartedLaterRaisesTheCurrentHoldersFence) {
  gateway_.reset();
  ASSERT_OK_AND_ASSIGN(holder, Lock("zk/nightly"));
  StartGateway({"--zookeeper_endpoint=" + zookeeper_->endpoint(),
                "--zookeeper_lock_path=/locks"});
  // Raised before the gateway served its first request.
  EXPECT_EQ(Highest("zk/nightly"), holder->czxid());
}

}  // namespace
}  // namespace fencegate
