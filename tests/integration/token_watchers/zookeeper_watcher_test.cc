// Copyright fencegate authors.
//
// The ZooKeeper token watcher against a real ZooKeeper: it reports each
// lock's holder (its oldest "lock-" znode) with that znode's czxid, never a
// waiter; the next holder when the first is deleted or its session ends;
// locks that exist at Start(); nested lock names; and it answers HolderOf
// from ZooKeeper. A partition is noticed and followed by a catch-up.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "metrics/metrics_context.h"
#include "tests/test_util.h"
#include "tests/zookeeper_locks.h"
#include "tests/zookeeper_server.h"
#include "token_watchers/builtin.h"
#include "token_watchers/registry.h"

namespace fencegate {
namespace {

using ::fencegate::testing::LockZnode;
using ::fencegate::testing::StatusIs;
using ::fencegate::testing::WaitFor;
using ::fencegate::testing::ZooKeeperServer;
using ::testing::ElementsAre;

class ZooKeeperWatcherTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto server = ZooKeeperServer::Start();
    // Not ASSERT: a fatal failure here makes gtest skip the suite's tests,
    // which CTest counts as skipped, not failed. Each test fails instead.
    if (!server.ok()) {
      start_error_ = server.status().ToString();
      return;
    }
    server_ = server->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(server_, nullptr) << start_error_;
    // Each test its own locks: the server lives through the suite.
    root_ = absl::StrCat(
        "/", ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }

  TokenWatcherSpec Spec() const {
    TokenWatcherSpec spec;
    spec.kind = "zookeeper";
    spec.endpoint = server_->endpoint();
    spec.lock_path = root_;
    spec.rpc_timeout = absl::Seconds(20);  // Generous: the suite runs loaded.
    return spec;
  }

  absl::StatusOr<std::unique_ptr<TokenWatcher>> Create(
      const TokenWatcherSpec& spec) {
    TokenWatcherRegistry registry;
    if (absl::Status s = RegisterBuiltinWatchers(registry); !s.ok()) return s;
    TokenWatcherContext context;
    context.on_holder = [this](const std::string& domain, uint64_t token) {
      absl::MutexLock lock(&mu_);
      reports_.emplace_back(domain, token);
    };
    context.on_error = [this](const absl::Status& error) {
      absl::MutexLock lock(&mu_);
      errors_.push_back(error);
    };
    context.metrics = MetricsContext{&metrics_registry_, &scrape_gauges_};
    return registry.Create(spec, std::move(context));
  }

  std::unique_ptr<TokenWatcher> Started() {
    absl::StatusOr<std::unique_ptr<TokenWatcher>> watcher = Create(Spec());
    EXPECT_TRUE(watcher.ok()) << watcher.status();
    if (!watcher.ok()) return nullptr;
    absl::Status started = (*watcher)->Start();
    EXPECT_TRUE(started.ok()) << started;
    return *std::move(watcher);
  }

  absl::StatusOr<std::unique_ptr<LockZnode>> Lock(const std::string& name) {
    return LockZnode::Create(server_->endpoint(),
                             absl::StrCat(root_, "/", name));
  }

  std::vector<uint64_t> TokensOf(const std::string& domain) {
    absl::MutexLock lock(&mu_);
    std::vector<uint64_t> tokens;
    for (const auto& [d, t] : reports_) {
      if (d == domain) tokens.push_back(t);
    }
    return tokens;
  }
  bool Reported(const std::string& domain, uint64_t token) {
    for (uint64_t t : TokensOf(domain)) {
      if (t == token) return true;
    }
    return false;
  }

  // fencegate_watcher_connected{source="zookeeper"} as a scrape reads it;
  // -1 if it is not exported.
  double ConnectedGauge() const {
    for (const prometheus::MetricFamily& family : scrape_gauges_.Collect()) {
      if (family.name != "fencegate_watcher_connected") continue;
      for (const prometheus::ClientMetric& metric : family.metric) {
        for (const auto& label : metric.label) {
          if (label.name == "source" && label.value == "zookeeper") {
            return metric.gauge.value;
          }
        }
      }
    }
    return -1;
  }

  static ZooKeeperServer* server_;

  static inline std::string start_error_;
  std::string root_;
  prometheus::Registry metrics_registry_;
  ScrapeGauges scrape_gauges_;
  absl::Mutex mu_;
  std::vector<std::pair<std::string, uint64_t>> reports_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Status> errors_ ABSL_GUARDED_BY(mu_);
};

ZooKeeperServer* ZooKeeperWatcherTest::server_ = nullptr;

TEST_F(ZooKeeperWatcherTest, ReportsEachHoldersCzxidButNoWaiter) {
  std::unique_ptr<TokenWatcher> watcher = Started();
  ASSERT_NE(watcher, nullptr);
  EXPECT_TRUE(watcher->connected());
  ASSERT_OK_AND_ASSIGN(holder, Lock("jobs"));
  EXPECT_TRUE(WaitFor([&] { return Reported("jobs", holder->czxid()); }));
  ASSERT_OK_AND_ASSIGN(waiter, Lock("jobs"));
  // Two later locks' reports prove the watcher has read "jobs" again since
  // the waiter's znode came: the second marker's event is only handled in a
  // pass after the one that found the first.
  ASSERT_OK_AND_ASSIGN(marker, Lock("marker"));
  ASSERT_TRUE(WaitFor([&] { return Reported("marker", marker->czxid()); }));
  ASSERT_OK_AND_ASSIGN(marker2, Lock("marker2"));
  ASSERT_TRUE(WaitFor([&] { return Reported("marker2", marker2->czxid()); }));
  EXPECT_THAT(TokensOf("jobs"), ElementsAre(holder->czxid()));

  ASSERT_OK(holder->Delete());  // A release: the waiter holds the lock now.
  EXPECT_TRUE(WaitFor([&] { return Reported("jobs", waiter->czxid()); }));
  EXPECT_THAT(TokensOf("jobs"), ElementsAre(holder->czxid(), waiter->czxid()));
}

TEST_F(ZooKeeperWatcherTest, AnEndedSessionHandsTheLockOn) {
  std::unique_ptr<TokenWatcher> watcher = Started();
  ASSERT_NE(watcher, nullptr);
  ASSERT_OK_AND_ASSIGN(holder, Lock("jobs"));
  ASSERT_OK_AND_ASSIGN(waiter, Lock("jobs"));
  ASSERT_TRUE(WaitFor([&] { return Reported("jobs", holder->czxid()); }));
  holder.reset();  // Its session closes: the ephemeral znode goes.
  EXPECT_TRUE(WaitFor([&] { return Reported("jobs", waiter->czxid()); }));
}

TEST_F(ZooKeeperWatcherTest, StartReportsCurrentHoldersOfNestedLocks) {
  ASSERT_OK_AND_ASSIGN(june, Lock("billing/june"));
  ASSERT_OK_AND_ASSIGN(june_waiter, Lock("billing/june"));
  ASSERT_OK_AND_ASSIGN(billing, Lock("billing"));
  std::unique_ptr<TokenWatcher> watcher = Started();
  ASSERT_NE(watcher, nullptr);
  // Reported before Start() returned.
  EXPECT_THAT(TokensOf("billing/june"), ElementsAre(june->czxid()));
  EXPECT_THAT(TokensOf("billing"), ElementsAre(billing->czxid()));
  // A lock under a znode created after Start() is followed too.
  ASSERT_OK_AND_ASSIGN(july, Lock("billing/2026/july"));
  EXPECT_TRUE(
      WaitFor([&] { return Reported("billing/2026/july", july->czxid()); }));
}

TEST_F(ZooKeeperWatcherTest, CuratorsProtectedNamesAreOrderedBySequence) {
  std::unique_ptr<TokenWatcher> watcher = Started();
  ASSERT_NE(watcher, nullptr);
  const std::string parent = absl::StrCat(root_, "/curator");
  // The first holder's prefix sorts after the second's as text.
  ASSERT_OK_AND_ASSIGN(
      first, LockZnode::Create(server_->endpoint(), parent, "_c_zzzz-lock-"));
  ASSERT_OK_AND_ASSIGN(
      second, LockZnode::Create(server_->endpoint(), parent, "_c_aaaa-lock-"));
  ASSERT_TRUE(WaitFor([&] { return Reported("curator", first->czxid()); }));
  ASSERT_OK_AND_ASSIGN(holder, watcher->HolderOf("curator"));
  EXPECT_EQ(holder.token, first->czxid());
  ASSERT_OK(first->Delete());
  EXPECT_TRUE(WaitFor([&] { return Reported("curator", second->czxid()); }));
  EXPECT_THAT(TokensOf("curator"),
              ElementsAre(first->czxid(), second->czxid()));
}

TEST_F(ZooKeeperWatcherTest, ADeletedLockPathIsMadeAgainAndFollowed) {
  std::unique_ptr<TokenWatcher> watcher = Started();
  ASSERT_NE(watcher, nullptr);
  {
    ASSERT_OK_AND_ASSIGN(
        session, client::zookeeper_internal::ZooKeeperSession::Open(
                     server_->endpoint(), absl::Seconds(4), absl::Seconds(10)));
    ASSERT_EQ(zoo_delete(session->handle(), root_.c_str(), -1), ZOK);
  }
  ASSERT_OK_AND_ASSIGN(holder, Lock("jobs"));
  EXPECT_TRUE(WaitFor([&] { return Reported("jobs", holder->czxid()); }));
}

TEST_F(ZooKeeperWatcherTest, HolderOfAsksZooKeeper) {
  std::unique_ptr<TokenWatcher> watcher = Started();
  ASSERT_NE(watcher, nullptr);
  ASSERT_OK_AND_ASSIGN(nobody, watcher->HolderOf("jobs"));
  EXPECT_EQ(nobody.token, 0u);
  ASSERT_OK_AND_ASSIGN(holder, Lock("jobs"));
  ASSERT_OK_AND_ASSIGN(waiter, Lock("jobs"));
  // Asked at once: the answer does not wait for the watch.
  ASSERT_OK_AND_ASSIGN(found, watcher->HolderOf("jobs"));
  EXPECT_EQ(found.token, holder->czxid());
  EXPECT_GE(found.newest, waiter->czxid());
}

TEST_F(ZooKeeperWatcherTest, APartitionIsNoticedAndCaughtUpOn) {
  std::unique_ptr<TokenWatcher> watcher = Started();
  ASSERT_NE(watcher, nullptr);
  ASSERT_OK_AND_ASSIGN(holder, Lock("jobs"));
  ASSERT_TRUE(WaitFor([&] { return Reported("jobs", holder->czxid()); }));
  EXPECT_EQ(ConnectedGauge(), 1);
  server_->Pause();
  const bool noticed =
      WaitFor([&] { return !watcher->connected(); }, absl::Seconds(30));
  const double gauge_while_paused = ConnectedGauge();
  server_->Resume();
  EXPECT_TRUE(noticed);
  EXPECT_EQ(gauge_while_paused, 0);
  EXPECT_TRUE(WaitFor([&] { return watcher->connected(); }, absl::Seconds(30)));
  ASSERT_OK_AND_ASSIGN(next, Lock("next"));
  EXPECT_TRUE(WaitFor([&] { return Reported("next", next->czxid()); },
                      absl::Seconds(30)));
}

TEST_F(ZooKeeperWatcherTest, StartFailsWithoutZooKeeperAndStopIsFinal) {
  TokenWatcherSpec nowhere = Spec();
  nowhere.endpoint = "127.0.0.1:1";
  nowhere.rpc_timeout = absl::Milliseconds(500);
  ASSERT_OK_AND_ASSIGN(lost, Create(nowhere));
  EXPECT_THAT(lost->Start(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_FALSE(lost->connected());

  std::unique_ptr<TokenWatcher> watcher = Started();
  ASSERT_NE(watcher, nullptr);
  EXPECT_THAT(watcher->Start(),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  watcher->Stop();
  watcher->Stop();
  EXPECT_THAT(watcher->Start(),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(watcher->HolderOf("jobs"),
              StatusIs(absl::StatusCode::kUnavailable));
}

TEST_F(ZooKeeperWatcherTest, InvalidSpecsAreRejected) {
  for (const char* path : {"relative", "/trailing/", ""}) {
    TokenWatcherSpec spec = Spec();
    spec.lock_path = path;
    absl::StatusOr<std::unique_ptr<TokenWatcher>> watcher = Create(spec);
    if (std::string(path).empty()) {
      EXPECT_OK(watcher.status());  // The default, /fencegate/locks.
    } else {
      EXPECT_THAT(watcher, StatusIs(absl::StatusCode::kInvalidArgument))
          << path;
    }
  }
  TokenWatcherSpec tls = Spec();
  tls.tls.ca = "/etc/ssl/certs/ca-certificates.crt";
  EXPECT_THAT(Create(tls), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace fencegate
