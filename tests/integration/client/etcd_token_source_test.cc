// Copyright fencegate authors.
//
// EtcdTokenSource against a real etcd (tests/etcd_server.h): the token is
// the lock key's create_revision, locks exclude each other, tokens only
// rise (also across an etcd restart), release is compare-and-delete, and a
// lost lease is reported.

#include "fencegate/client/etcd/etcd_token_source.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "tests/etcd_server.h"
#include "tests/test_util.h"

namespace fencegate::client {
namespace {

using ::fencegate::testing::EtcdServer;
using ::fencegate::testing::StatusIs;
using ::fencegate::testing::WaitFor;

constexpr char kJobsDir[] = "fencegate/locks/jobs/";

LockOptions Options(absl::Duration wait, absl::Duration ttl = absl::Seconds(10),
                    std::string owner = "") {
  LockOptions options;
  options.wait = wait;
  options.ttl = ttl;
  options.owner = std::move(owner);
  return options;
}

class EtcdTokenSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<EtcdServer>> started = EtcdServer::Start();
    ASSERT_TRUE(started.ok()) << started.status();
    etcd_ = *std::move(started);
    source_ = NewSource();
    ASSERT_NE(source_, nullptr);
  }

  std::unique_ptr<EtcdTokenSource> NewSource(
      absl::Duration rpc_timeout = absl::Seconds(5)) {
    EtcdTokenSourceOptions options;
    options.endpoint = etcd_->endpoint();
    options.rpc_timeout = rpc_timeout;
    absl::StatusOr<std::unique_ptr<EtcdTokenSource>> source =
        EtcdTokenSource::Create(options);
    EXPECT_TRUE(source.ok()) << source.status();
    return source.ok() ? *std::move(source) : nullptr;
  }

  // The lock keys of "jobs", oldest first.
  std::vector<mvccpb::KeyValue> JobsKeys() {
    absl::StatusOr<std::vector<mvccpb::KeyValue>> kvs =
        etcd_->RangePrefix(kJobsDir);
    EXPECT_TRUE(kvs.ok()) << kvs.status();
    return kvs.ok() ? *kvs : std::vector<mvccpb::KeyValue>{};
  }

  std::unique_ptr<EtcdServer> etcd_;
  std::unique_ptr<EtcdTokenSource> source_;
};

TEST_F(EtcdTokenSourceTest, TokenIsTheLockKeysCreateRevision) {
  ASSERT_OK_AND_ASSIGN(
      lock,
      source_->Acquire(
          "jobs", Options(absl::ZeroDuration(), absl::Seconds(10), "worker-1"),
          nullptr));
  std::vector<mvccpb::KeyValue> kvs = JobsKeys();
  ASSERT_EQ(kvs.size(), 1u);
  EXPECT_EQ(lock->name(), "jobs");
  EXPECT_EQ(lock->token(), static_cast<uint64_t>(kvs[0].create_revision()));
  ASSERT_NE(kvs[0].lease(), 0);
  // The etcdctl lock layout: <prefix>/<name>/<lease ID in hex>.
  EXPECT_EQ(
      kvs[0].key(),
      absl::StrCat(kJobsDir, absl::Hex(static_cast<uint64_t>(kvs[0].lease()))));
  EXPECT_EQ(kvs[0].value(), "worker-1");
  EXPECT_FALSE(lock->lost());
}

TEST_F(EtcdTokenSourceTest, SecondAcquireWithZeroWaitFailsWhileHeld) {
  ASSERT_OK_AND_ASSIGN(
      holder, source_->Acquire("jobs", Options(absl::ZeroDuration()), nullptr));
  EXPECT_THAT(source_->Acquire("jobs", Options(absl::ZeroDuration()), nullptr),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  // The refused waiter removed its key: only the holder's is left.
  std::vector<mvccpb::KeyValue> kvs = JobsKeys();
  ASSERT_EQ(kvs.size(), 1u);
  EXPECT_EQ(static_cast<uint64_t>(kvs[0].create_revision()), holder->token());
  EXPECT_FALSE(holder->lost());
}

TEST_F(EtcdTokenSourceTest, NextHolderGetsAHigherTokenAfterRelease) {
  ASSERT_OK_AND_ASSIGN(
      first, source_->Acquire("jobs", Options(absl::ZeroDuration()), nullptr));
  ASSERT_OK(first->Release());
  EXPECT_TRUE(JobsKeys().empty());
  EXPECT_TRUE(first->lost());

  ASSERT_OK_AND_ASSIGN(
      second, source_->Acquire("jobs", Options(absl::ZeroDuration()), nullptr));
  EXPECT_GT(second->token(), first->token());
  std::vector<mvccpb::KeyValue> kvs = JobsKeys();
  ASSERT_EQ(kvs.size(), 1u);
  EXPECT_EQ(static_cast<uint64_t>(kvs[0].create_revision()), second->token());
}

TEST_F(EtcdTokenSourceTest, WaiterGetsTheLockWhenTheHolderReleases) {
  ASSERT_OK_AND_ASSIGN(
      holder, source_->Acquire("jobs", Options(absl::ZeroDuration()), nullptr));
  absl::StatusOr<std::unique_ptr<HeldLock>> waited;
  std::jthread waiter([&] {
    waited = source_->Acquire("jobs", Options(absl::Seconds(60)), nullptr);
  });
  // The waiter's key is in line behind the holder's.
  ASSERT_TRUE(WaitFor([&] { return JobsKeys().size() == 2; }));
  const uint64_t waiter_revision =
      static_cast<uint64_t>(JobsKeys()[1].create_revision());
  EXPECT_GT(waiter_revision, holder->token());

  ASSERT_OK(holder->Release());
  waiter.join();
  ASSERT_TRUE(waited.ok()) << waited.status();
  EXPECT_EQ((*waited)->token(), waiter_revision);
  EXPECT_GT((*waited)->token(), holder->token());
}

TEST_F(EtcdTokenSourceTest, WaiterTimesOutWhileKeepAliveHoldsTheLease) {
  // A 5 s lease would be gone long before the 12 s wait ends without
  // keep-alive (and is long enough to ride out a stalled etcd).
  ASSERT_OK_AND_ASSIGN(
      holder,
      source_->Acquire("jobs", Options(absl::ZeroDuration(), absl::Seconds(5)),
                       nullptr));
  EXPECT_THAT(source_->Acquire("jobs", Options(absl::Seconds(12)), nullptr),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_FALSE(holder->lost());
  std::vector<mvccpb::KeyValue> kvs = JobsKeys();
  ASSERT_EQ(kvs.size(), 1u);
  EXPECT_EQ(static_cast<uint64_t>(kvs[0].create_revision()), holder->token());
  EXPECT_OK(holder->Release());
}

TEST_F(EtcdTokenSourceTest, ReleaseOfAReplacedKeyIsRefusedAndLeavesItAlone) {
  ASSERT_OK_AND_ASSIGN(
      lock, source_->Acquire("jobs", Options(absl::ZeroDuration()), nullptr));
  const std::string key = JobsKeys().at(0).key();
  // Someone else deletes and re-creates the same key.
  ASSERT_OK(etcd_->Delete(key));
  ASSERT_OK_AND_ASSIGN(intruder_revision, etcd_->Put(key, "intruder"));

  EXPECT_THAT(lock->Release(), StatusIs(absl::StatusCode::kFailedPrecondition));
  std::vector<mvccpb::KeyValue> kvs = JobsKeys();
  ASSERT_EQ(kvs.size(), 1u);
  EXPECT_EQ(kvs[0].value(), "intruder");
  EXPECT_EQ(kvs[0].create_revision(), intruder_revision);
}

TEST_F(EtcdTokenSourceTest, RevokedLeaseIsReportedOnceAndReleaseIsRefused) {
  std::atomic<int> lost_calls{0};
  ASSERT_OK_AND_ASSIGN(
      lock,
      source_->Acquire("jobs", Options(absl::ZeroDuration(), absl::Seconds(3)),
                       [&] { lost_calls.fetch_add(1); }));
  ASSERT_OK(etcd_->RevokeLease(JobsKeys().at(0).lease()));

  ASSERT_TRUE(WaitFor([&] { return lost_calls.load() > 0; }));
  EXPECT_TRUE(lock->lost());
  EXPECT_THAT(lock->Release(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(lost_calls.load(), 1);  // Release() joined the keep-alive thread.

  // The lock is free, and the next token is higher.
  ASSERT_OK_AND_ASSIGN(
      next, source_->Acquire("jobs", Options(absl::ZeroDuration()), nullptr));
  EXPECT_GT(next->token(), lock->token());
}

TEST_F(EtcdTokenSourceTest, KilledEtcdIsReportedAsLostLease) {
  std::unique_ptr<EtcdTokenSource> source = NewSource(absl::Seconds(1));
  ASSERT_NE(source, nullptr);
  std::atomic<int> lost_calls{0};
  ASSERT_OK_AND_ASSIGN(
      lock,
      source->Acquire("jobs", Options(absl::ZeroDuration(), absl::Seconds(2)),
                      [&] { lost_calls.fetch_add(1); }));
  etcd_->Kill();

  ASSERT_TRUE(WaitFor([&] { return lost_calls.load() > 0; }));
  EXPECT_TRUE(lock->lost());
  EXPECT_THAT(lock->Release(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(lost_calls.load(), 1);
}

TEST_F(EtcdTokenSourceTest, UnreachableEtcdIsUnavailable) {
  std::unique_ptr<EtcdTokenSource> source = NewSource(absl::Milliseconds(500));
  ASSERT_NE(source, nullptr);
  etcd_->Kill();
  EXPECT_THAT(source->Acquire("jobs", Options(absl::Seconds(5)), nullptr),
              StatusIs(absl::StatusCode::kUnavailable));
}

TEST_F(EtcdTokenSourceTest, TokensNeverGoBackwardsAcrossAnEtcdRestart) {
  ASSERT_OK_AND_ASSIGN(
      before, source_->Acquire("jobs", Options(absl::ZeroDuration()), nullptr));
  ASSERT_OK(before->Release());

  etcd_->Kill();  // SIGKILL: no clean shutdown.
  ASSERT_OK(etcd_->Restart());

  // The same source reconnects by itself.
  ASSERT_OK_AND_ASSIGN(
      after, source_->Acquire("jobs", Options(absl::ZeroDuration()), nullptr));
  EXPECT_GT(after->token(), before->token());
  ASSERT_OK_AND_ASSIGN(
      other, source_->Acquire("other", Options(absl::ZeroDuration()), nullptr));
  EXPECT_GT(other->token(), after->token());
}

TEST_F(EtcdTokenSourceTest, NestedNamesAreSeparateLocks) {
  ASSERT_OK_AND_ASSIGN(
      inner, source_->Acquire("files/reports/daily.csv",
                              Options(absl::ZeroDuration()), nullptr));
  // "files/reports" shares the key prefix but is another lock.
  ASSERT_OK_AND_ASSIGN(
      outer, source_->Acquire("files/reports", Options(absl::ZeroDuration()),
                              nullptr));
  EXPECT_GT(outer->token(), inner->token());
  EXPECT_THAT(source_->Acquire("files/reports/daily.csv",
                               Options(absl::ZeroDuration()), nullptr),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(
      source_->Acquire("files/reports", Options(absl::ZeroDuration()), nullptr),
      StatusIs(absl::StatusCode::kDeadlineExceeded));
}

TEST_F(EtcdTokenSourceTest, InvalidArgumentsTouchNothing) {
  EXPECT_THAT(source_->Acquire("", Options(absl::ZeroDuration()), nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(source_->Acquire(std::string("a\0b", 3),
                               Options(absl::ZeroDuration()), nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(source_->Acquire(std::string(513, 'x'),
                               Options(absl::ZeroDuration()), nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(
      source_->Acquire(
          "jobs", Options(absl::ZeroDuration(), absl::ZeroDuration()), nullptr),
      StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(source_->Acquire("jobs", Options(absl::Seconds(-1)), nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument));
  absl::StatusOr<std::vector<mvccpb::KeyValue>> kvs =
      etcd_->RangePrefix("fencegate/");
  ASSERT_TRUE(kvs.ok()) << kvs.status();
  EXPECT_TRUE(kvs->empty());

  EtcdTokenSourceOptions https;
  https.endpoint = "https://127.0.0.1:2379";
  EXPECT_THAT(EtcdTokenSource::Create(https),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EtcdTokenSourceOptions no_prefix;
  no_prefix.prefix = "/";
  EXPECT_THAT(EtcdTokenSource::Create(no_prefix),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EtcdTokenSourceOptions no_timeout;
  no_timeout.rpc_timeout = absl::ZeroDuration();
  EXPECT_THAT(EtcdTokenSource::Create(no_timeout),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// `etcdctl lock` and EtcdTokenSource use the same keys, so they exclude
// each other.
TEST_F(EtcdTokenSourceTest, EtcdctlLockHoldersExcludeUs) {
  ::fencegate::testing::TempDir dir;
  const std::string out_path = absl::StrCat(dir.path(), "/etcdctl.out");
  const std::string endpoints = absl::StrCat("--endpoints=", etcd_->endpoint());
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out >= 0) ::dup2(out, STDOUT_FILENO);
    ::execl("/usr/bin/etcdctl", "etcdctl", endpoints.c_str(), "lock",
            "fencegate/locks/jobs", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // etcdctl prints the key it holds.
  bool held = WaitFor([&] {
    absl::StatusOr<std::string> out = ::fencegate::testing::ReadFile(out_path);
    return out.ok() && absl::StrContains(*out, kJobsDir);
  });
  EXPECT_TRUE(held);
  if (held) {
    EXPECT_THAT(
        source_->Acquire("jobs", Options(absl::ZeroDuration()), nullptr),
        StatusIs(absl::StatusCode::kDeadlineExceeded));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

}  // namespace
}  // namespace fencegate::client
