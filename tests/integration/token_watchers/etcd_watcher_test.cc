// Copyright fencegate authors.
//
// The etcd token watcher against a real etcd: it reports each lock's owner (the
// key with the lowest create_revision), never a waiter, catches up on
// start, and follows etcd across a restart.

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "fencegate/client/etcd/etcd_token_source.h"
#include "fencegate/common/sync_point.h"
#include "tests/etcd_server.h"
#include "tests/test_util.h"
#include "token_watchers/builtin.h"
#include "token_watchers/registry.h"

namespace fencegate {
namespace {

using client::EtcdTokenSource;
using client::EtcdTokenSourceOptions;
using client::HeldLock;
using client::LockOptions;

using ::fencegate::testing::EtcdServer;
using ::fencegate::testing::StatusIs;
using ::fencegate::testing::WaitFor;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// What the watcher reported, in order (the gateway would Fence() these).
class Recorder {
 public:
  TokenWatcherContext Context() {
    TokenWatcherContext context;
    context.on_holder = [this](const std::string& domain, uint64_t token) {
      absl::MutexLock lock(&mu_);
      calls_.emplace_back(domain, token);
    };
    return context;
  }
  std::vector<uint64_t> TokensOf(const std::string& domain) {
    absl::MutexLock lock(&mu_);
    std::vector<uint64_t> tokens;
    for (const auto& [d, t] : calls_) {
      if (d == domain) tokens.push_back(t);
    }
    return tokens;
  }
  bool Has(const std::string& domain, uint64_t token) {
    for (uint64_t t : TokensOf(domain)) {
      if (t == token) return true;
    }
    return false;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::pair<std::string, uint64_t>> calls_ ABSL_GUARDED_BY(mu_);
};

LockOptions Options(absl::Duration wait) {
  LockOptions options;
  options.wait = wait;
  return options;
}

class EtcdFenceWatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<EtcdServer>> started = EtcdServer::Start();
    ASSERT_TRUE(started.ok()) << started.status();
    etcd_ = *std::move(started);
    EtcdTokenSourceOptions options;
    options.endpoint = etcd_->endpoint();
    absl::StatusOr<std::unique_ptr<EtcdTokenSource>> source =
        EtcdTokenSource::Create(options);
    ASSERT_TRUE(source.ok()) << source.status();
    source_ = *std::move(source);
  }

  TokenWatcherSpec Spec() {
    TokenWatcherSpec spec;
    spec.kind = "etcd";
    spec.endpoint = etcd_->endpoint();
    return spec;
  }

  absl::StatusOr<std::unique_ptr<TokenWatcher>> Create(
      const TokenWatcherSpec& spec, TokenWatcherContext context) {
    TokenWatcherRegistry registry;
    if (absl::Status s = RegisterBuiltinWatchers(registry); !s.ok()) return s;
    return registry.Create(spec, std::move(context));
  }

  std::unique_ptr<TokenWatcher> NewWatcher(
      absl::Duration rpc_timeout = absl::Seconds(5)) {
    TokenWatcherSpec spec = Spec();
    spec.rpc_timeout = rpc_timeout;
    TokenWatcherContext context = recorder_.Context();
    context.on_error = [this](const absl::Status&) { errors_.fetch_add(1); };
    absl::StatusOr<std::unique_ptr<TokenWatcher>> watcher =
        Create(spec, std::move(context));
    EXPECT_TRUE(watcher.ok()) << watcher.status();
    return watcher.ok() ? *std::move(watcher) : nullptr;
  }

  // The create_revisions of the "jobs" lock keys, oldest first.
  std::vector<uint64_t> JobsRevisions() {
    absl::StatusOr<std::vector<mvccpb::KeyValue>> kvs =
        etcd_->RangePrefix("fencegate/locks/jobs/");
    EXPECT_TRUE(kvs.ok()) << kvs.status();
    std::vector<uint64_t> revisions;
    if (kvs.ok()) {
      for (const mvccpb::KeyValue& kv : *kvs) {
        revisions.push_back(static_cast<uint64_t>(kv.create_revision()));
      }
    }
    return revisions;
  }

  std::unique_ptr<EtcdServer> etcd_;
  std::unique_ptr<EtcdTokenSource> source_;
  Recorder recorder_;
  std::atomic<int> errors_{0};
};

TEST_F(EtcdFenceWatcherTest, ReportsANewHoldersRevision) {
  std::unique_ptr<TokenWatcher> watcher = NewWatcher();
  ASSERT_OK(watcher->Start());
  ASSERT_OK_AND_ASSIGN(
      lock, source_->Acquire("jobs", Options(absl::ZeroDuration()), nullptr));
  EXPECT_TRUE(WaitFor([&] { return recorder_.Has("jobs", lock->token()); }));

  // A name with slashes (a file path as the domain) comes through whole.
  ASSERT_OK_AND_ASSIGN(
      file, source_->Acquire("files/reports/daily.csv",
                             Options(absl::ZeroDuration()), nullptr));
  EXPECT_TRUE(WaitFor(
      [&] { return recorder_.Has("files/reports/daily.csv", file->token()); }));
  EXPECT_THAT(recorder_.TokensOf("jobs"), ElementsAre(lock->token()));
}

TEST_F(EtcdFenceWatcherTest, WaitersKeyDoesNotRaiseTheFence) {
  std::unique_ptr<TokenWatcher> watcher = NewWatcher();
  ASSERT_OK(watcher->Start());
  ASSERT_OK_AND_ASSIGN(
      holder, source_->Acquire("jobs", Options(absl::ZeroDuration()), nullptr));
  ASSERT_TRUE(WaitFor([&] { return recorder_.Has("jobs", holder->token()); }));

  absl::StatusOr<std::unique_ptr<HeldLock>> waited;
  std::jthread waiter([&] {
    waited = source_->Acquire("jobs", Options(absl::Seconds(60)), nullptr);
  });
  ASSERT_TRUE(WaitFor([&] { return JobsRevisions().size() == 2; }));
  const uint64_t waiter_revision = JobsRevisions()[1];

  // Watch events arrive in revision order: once the watcher reports a lock
  // taken after the waiter queued, it has seen the waiter's key too.
  ASSERT_OK_AND_ASSIGN(
      marker,
      source_->Acquire("marker", Options(absl::ZeroDuration()), nullptr));
  ASSERT_GT(marker->token(), waiter_revision);
  ASSERT_TRUE(
      WaitFor([&] { return recorder_.Has("marker", marker->token()); }));
  EXPECT_THAT(recorder_.TokensOf("jobs"), ElementsAre(holder->token()));

  // Once the holder lets go, the waiter owns the lock and is reported.
  ASSERT_OK(holder->Release());
  waiter.join();
  ASSERT_TRUE(waited.ok()) << waited.status();
  EXPECT_EQ((*waited)->token(), waiter_revision);
  EXPECT_TRUE(WaitFor([&] { return recorder_.Has("jobs", waiter_revision); }));
  EXPECT_THAT(recorder_.TokensOf("jobs"),
              ElementsAre(holder->token(), waiter_revision));
}

TEST_F(EtcdFenceWatcherTest, StartReportsTheCurrentOwnerButNotWaiters) {
  ASSERT_OK_AND_ASSIGN(
      holder, source_->Acquire("jobs", Options(absl::ZeroDuration()), nullptr));
  absl::StatusOr<std::unique_ptr<HeldLock>> waited;
  std::jthread waiter([&] {
    waited = source_->Acquire("jobs", Options(absl::Seconds(60)), nullptr);
  });
  ASSERT_TRUE(WaitFor([&] { return JobsRevisions().size() == 2; }));

  std::unique_ptr<TokenWatcher> watcher = NewWatcher();
  ASSERT_OK(watcher->Start());
  // Start() returns after the catch-up: no waiting needed.
  EXPECT_THAT(recorder_.TokensOf("jobs"), ElementsAre(holder->token()));

  ASSERT_OK(holder->Release());
  waiter.join();
  ASSERT_TRUE(waited.ok()) << waited.status();
}

TEST_F(EtcdFenceWatcherTest, ExpiredHoldersSuccessorIsReported) {
  std::unique_ptr<TokenWatcher> watcher = NewWatcher();
  ASSERT_OK(watcher->Start());
  ASSERT_OK_AND_ASSIGN(
      holder, source_->Acquire("jobs", Options(absl::ZeroDuration()), nullptr));
  absl::StatusOr<std::unique_ptr<HeldLock>> waited;
  std::jthread waiter([&] {
    waited = source_->Acquire("jobs", Options(absl::Seconds(60)), nullptr);
  });
  ASSERT_TRUE(WaitFor([&] { return JobsRevisions().size() == 2; }));
  const uint64_t waiter_revision = JobsRevisions()[1];

  // The holder's lease ends (as if it had hung): etcd deletes its key.
  absl::StatusOr<std::vector<mvccpb::KeyValue>> kvs =
      etcd_->RangePrefix("fencegate/locks/jobs/");
  ASSERT_TRUE(kvs.ok()) << kvs.status();
  ASSERT_OK(etcd_->RevokeLease(kvs->at(0).lease()));

  waiter.join();
  ASSERT_TRUE(waited.ok()) << waited.status();
  EXPECT_TRUE(WaitFor([&] { return recorder_.Has("jobs", waiter_revision); }));
  EXPECT_THAT(recorder_.TokensOf("jobs"),
              ElementsAre(holder->token(), waiter_revision));
}

TEST_F(EtcdFenceWatcherTest, FollowsEtcdAcrossARestart) {
  std::unique_ptr<TokenWatcher> watcher = NewWatcher();
  ASSERT_OK(watcher->Start());
  ASSERT_OK_AND_ASSIGN(
      before, source_->Acquire("jobs", Options(absl::ZeroDuration()), nullptr));
  ASSERT_TRUE(WaitFor([&] { return recorder_.Has("jobs", before->token()); }));
  ASSERT_OK(before->Release());

  etcd_->Kill();
  ASSERT_TRUE(WaitFor([&] { return errors_.load() > 0; }));  // Noticed.
  EXPECT_FALSE(watcher->connected());
  ASSERT_OK(etcd_->Restart());

  ASSERT_OK_AND_ASSIGN(
      after, source_->Acquire("jobs", Options(absl::ZeroDuration()), nullptr));
  EXPECT_GT(after->token(), before->token());
  EXPECT_TRUE(WaitFor([&] { return recorder_.Has("jobs", after->token()); }));
  EXPECT_THAT(recorder_.TokensOf("jobs"),
              ElementsAre(before->token(), after->token()));
  EXPECT_TRUE(WaitFor([&] { return watcher->connected(); }));
}

TEST_F(EtcdFenceWatcherTest, StartFailsWhileEtcdIsDownAndCanBeRetried) {
  etcd_->Kill();
  std::unique_ptr<TokenWatcher> watcher = NewWatcher(absl::Milliseconds(500));
  EXPECT_THAT(watcher->Start(), StatusIs(absl::StatusCode::kUnavailable));

  ASSERT_OK(etcd_->Restart());
  ASSERT_OK(watcher->Start());
  ASSERT_OK_AND_ASSIGN(
      lock, source_->Acquire("jobs", Options(absl::ZeroDuration()), nullptr));
  EXPECT_TRUE(WaitFor([&] { return recorder_.Has("jobs", lock->token()); }));
}

TEST_F(EtcdFenceWatcherTest, StopEndsTheWatcherForGood) {
  std::unique_ptr<TokenWatcher> watcher = NewWatcher();
  ASSERT_OK(watcher->Start());
  EXPECT_THAT(watcher->Start(),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  watcher->Stop();
  watcher->Stop();
  EXPECT_THAT(watcher->Start(),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

#ifdef FENCEGATE_SYNC_POINTS
// A watch from a revision etcd has compacted away is refused; the watcher
// then reads the whole prefix again and reports the owner it missed. The
// watcher is held just before it opens its first watch, while a lock is
// taken and the history compacted past it.
TEST_F(EtcdFenceWatcherTest, ReadsThePrefixAgainAfterItsHistoryWasCompacted) {
  absl::Notification at_watch, go;
  std::atomic<int> watches{0};
  SyncPoint::Get()->SetCallback("EtcdWatcher::Watch:Start", [&](void*) {
    if (watches.fetch_add(1) != 0) return;
    at_watch.Notify();
    go.WaitForNotification();
  });
  absl::Mutex mu;
  std::vector<absl::Status> errors;
  TokenWatcherContext context = recorder_.Context();
  context.on_error = [&](const absl::Status& s) {
    absl::MutexLock lock(&mu);
    errors.push_back(s);
  };
  ASSERT_OK_AND_ASSIGN(watcher, Create(Spec(), std::move(context)));
  ASSERT_OK(watcher->Start());
  ASSERT_TRUE(at_watch.WaitForNotificationWithTimeout(absl::Seconds(30)));

  absl::StatusOr<std::unique_ptr<HeldLock>> lock =
      source_->Acquire("jobs", Options(absl::ZeroDuration()), nullptr);
  absl::StatusOr<int64_t> last = etcd_->Put("unrelated", "x");
  absl::Status compacted = last.ok() ? etcd_->Compact(*last) : last.status();
  go.Notify();  // Before any assertion: the watcher's thread must go on.
  ASSERT_OK(lock.status());
  ASSERT_OK(compacted);

  EXPECT_TRUE(WaitFor([&] { return recorder_.Has("jobs", (*lock)->token()); }));
  EXPECT_GE(watches.load(), 2);  // The refused watch, then a new one.
  watcher->Stop();
  SyncPoint::Get()->ClearAll();
  absl::MutexLock l(&mu);
  ASSERT_FALSE(errors.empty());
  EXPECT_THAT(errors[0], StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(std::string(errors[0].message()), HasSubstr("compacted"));
}
#endif  // FENCEGATE_SYNC_POINTS

TEST_F(EtcdFenceWatcherTest, InvalidSpecsAreRejected) {
  TokenWatcherSpec no_prefix = Spec();
  no_prefix.lock_path = "/";
  EXPECT_THAT(Create(no_prefix, recorder_.Context()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));

  TokenWatcherSpec https = Spec();
  https.endpoint = "https://127.0.0.1:2379";  // TLS without a CA.
  EXPECT_THAT(Create(https, recorder_.Context()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));

  TokenWatcherSpec no_endpoint = Spec();
  no_endpoint.endpoint = "";
  EXPECT_THAT(Create(no_endpoint, recorder_.Context()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));

  TokenWatcherSpec unknown = Spec();
  unknown.kind = "consul";
  absl::Status status = Create(unknown, recorder_.Context()).status();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(status.message()), HasSubstr("etcd, zookeeper"));

  EXPECT_THAT(Create(Spec(), TokenWatcherContext{}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(EtcdFenceWatcherTest, HolderOfAsksEtcd) {
  std::unique_ptr<TokenWatcher> watcher = NewWatcher();
  ASSERT_OK(watcher->Start());
  EXPECT_TRUE(WaitFor([&] { return watcher->connected(); }));
  ASSERT_OK_AND_ASSIGN(nobody, watcher->HolderOf("jobs"));
  EXPECT_EQ(nobody.token, 0u);
  ASSERT_OK_AND_ASSIGN(
      lock, source_->Acquire("jobs", Options(absl::ZeroDuration()), nullptr));
  ASSERT_OK_AND_ASSIGN(holder, watcher->HolderOf("jobs"));
  EXPECT_EQ(holder.token, lock->token());
  EXPECT_GE(holder.newest, lock->token());
}

// A nested lock name shares the lock's key range in etcd
// ("<prefix>/reports/daily/<id>" under "<prefix>/reports/"), but is another
// lock: held, it is not the holder of "reports", whose own lock is free.
TEST_F(EtcdFenceWatcherTest, HolderOfSeesOnlyTheLocksOwnKeys) {
  std::unique_ptr<TokenWatcher> watcher = NewWatcher();
  ASSERT_OK(watcher->Start());
  EXPECT_TRUE(WaitFor([&] { return watcher->connected(); }));
  ASSERT_OK_AND_ASSIGN(
      nested, source_->Acquire("reports/daily", Options(absl::ZeroDuration()),
                               nullptr));
  ASSERT_OK_AND_ASSIGN(free_lock, watcher->HolderOf("reports"));
  EXPECT_EQ(free_lock.token, 0u);
  ASSERT_OK_AND_ASSIGN(
      own, source_->Acquire("reports", Options(absl::ZeroDuration()), nullptr));
  ASSERT_OK_AND_ASSIGN(held, watcher->HolderOf("reports"));
  EXPECT_EQ(held.token, own->token());
  EXPECT_NE(held.token, nested->token());
}

}  // namespace
}  // namespace fencegate
