// Copyright fencegate authors.
//
// The file adapter's commit thread (storage_adapters/file/
// file_commit_thread.h, file_commit.h): writes queued while a group is
// being committed share the next group; each keeps its own outcome and its
// result; the rules of the root's fence records hold for grouped writes;
// closing the adapter commits what is queued.

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "fencegate/common/stale_token.h"
#include "fencegate/common/sync_point.h"
#include "storage_adapters/file/file_adapter.h"
#include "tests/file_test_util.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

using ::fencegate::testing::ApplyAndWait;
using ::fencegate::testing::ReadFile;
using ::fencegate::testing::ScopedFileSizeLimit;
using ::fencegate::testing::StatusIs;

// One write handed to ApplyAsync, and what its callback was told.
struct Queued {
  Queued(std::string domain, uint64_t token, std::string path)
      : domain(std::move(domain)), path(std::move(path)) {
    target = WriteTarget{this->domain, token, this->path, ""};
  }
  std::string domain;
  std::string path;
  WriteTarget target;
  Operations ops;
  OpResults results;
  absl::Status outcome;
  absl::Notification done;
};

class FileCommitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_.path() + "/root";
    ASSERT_OK_AND_ASSIGN(adapter, FileAdapter::Open(root_));
    adapter_ = std::move(adapter);
  }
  void TearDown() override { SyncPoint::Get()->ClearAll(); }

  // Queues `q` on the adapter; returns once ApplyAsync has.
  void Start(Queued& q) {
    ASSERT_OK(adapter_->Validate(q.target, q.ops));
    adapter_->ApplyAsync(q.target, q.ops, &q.results, [&q](absl::Status s) {
      q.outcome = std::move(s);
      q.done.Notify();
    });
  }
  // Holds the commit thread once it has taken its first group, until
  // `release` is notified; `taken` is notified when it has.
  struct Hold {
    std::shared_ptr<absl::Notification> taken =
        std::make_shared<absl::Notification>();
    std::shared_ptr<absl::Notification> release =
        std::make_shared<absl::Notification>();
  };
  Hold HoldFirstGroup() {
    Hold hold;
    auto held = std::make_shared<std::atomic<bool>>(false);
    SyncPoint::Get()->SetCallback("FileCommitThread::Run:BeforeGroup",
                                  [hold, held](void*) {
                                    if (!held->exchange(true)) {
                                      hold.taken->Notify();
                                      hold.release->WaitForNotification();
                                    }
                                  });
    return hold;
  }
  std::string InRoot(const std::string& path) { return root_ + "/" + path; }

  testing::TempDir dir_;
  std::string root_;
  std::unique_ptr<FileAdapter> adapter_;
};

// Writes of many domains that queue while a group is committed are
// committed together, as one group, each with its own result.
TEST_F(FileCommitTest, WritesQueuedDuringAGroupShareTheNext) {
  FENCEGATE_SKIP_WITHOUT_SYNC_POINTS();
  Hold hold = HoldFirstGroup();
  constexpr int kWrites = 16;
  std::vector<std::unique_ptr<Queued>> writes;
  for (int i = 0; i < kWrites; ++i) {
    writes.push_back(std::make_unique<Queued>(absl::StrCat("domain-", i), 5,
                                              absl::StrCat("d", i, "/file")));
    writes.back()->ops.Add()->mutable_put()->set_data(absl::StrCat("v", i));
  }
  // The first is taken as a group of its own and held; the others queue.
  ASSERT_NO_FATAL_FAILURE(Start(*writes[0]));
  hold.taken->WaitForNotification();
  for (int i = 1; i < kWrites; ++i) ASSERT_NO_FATAL_FAILURE(Start(*writes[i]));
  hold.release->Notify();
  for (int i = 0; i < kWrites; ++i) {
    writes[i]->done.WaitForNotification();
    ASSERT_OK(writes[i]->outcome);
    ASSERT_EQ(writes[i]->results.size(), 1);
    EXPECT_FALSE(writes[i]->results[0].file().existed());
    EXPECT_EQ(writes[i]->results[0].file().size(), absl::StrCat("v", i).size());
    EXPECT_EQ(*ReadFile(InRoot(absl::StrCat("d", i, "/file"))),
              absl::StrCat("v", i));
  }
  const FileCommitThread::Counts counts = adapter_->commit_counts();
  EXPECT_EQ(counts.writes, kWrites);
  EXPECT_EQ(counts.groups, 2) << "the queued writes were not grouped";
}

// Put, append and delete through the commit thread report what Apply()
// does, and a write of several operations applies them in order.
TEST_F(FileCommitTest, GroupedWritesReportTheirResults) {
  auto apply = [&](uint64_t token, auto add_ops) {
    Operations ops;
    add_ops(ops);
    OpResults results;
    absl::Status s = ApplyAndWait(
        *adapter_, WriteTarget{"jobs", token, "log", ""}, ops, &results);
    return std::make_pair(s, results);
  };
  auto [first, first_results] = apply(
      1, [](Operations& ops) { ops.Add()->mutable_append()->set_data("a\n"); });
  ASSERT_OK(first);
  EXPECT_FALSE(first_results[0].file().existed());
  auto [second, second_results] = apply(
      1, [](Operations& ops) { ops.Add()->mutable_append()->set_data("b\n"); });
  ASSERT_OK(second);
  EXPECT_TRUE(second_results[0].file().existed());
  EXPECT_EQ(second_results[0].file().size(), 4);
  EXPECT_EQ(*ReadFile(InRoot("log")), "a\nb\n");
  auto [several, several_results] = apply(2, [](Operations& ops) {
    ops.Add()->mutable_put()->set_data("new\n");
    ops.Add()->mutable_append()->set_data("more\n");
  });
  ASSERT_OK(several);
  EXPECT_EQ(*ReadFile(InRoot("log")), "new\nmore\n");
  EXPECT_TRUE(several_results[0].file().existed());
  EXPECT_EQ(several_results[1].file().size(), 9);
  auto [removed, removed_results] =
      apply(2, [](Operations& ops) { ops.Add()->mutable_delete_(); });
  ASSERT_OK(removed);
  EXPECT_TRUE(removed_results[0].file().existed());
  EXPECT_FALSE(ReadFile(InRoot("log")).ok());
  auto [again, again_results] =
      apply(2, [](Operations& ops) { ops.Add()->mutable_delete_(); });
  ASSERT_OK(again);
  EXPECT_FALSE(again_results[0].file().existed());
}

// A grouped write meets the root's record: a token below it is refused
// and nothing is written; an advance raises it.
TEST_F(FileCommitTest, GroupedWritesKeepTheRootsFence) {
  ASSERT_OK_AND_ASSIGN(other, FileAdapter::Open(root_));
  ASSERT_OK(other->RaiseFence("jobs", 7));
  Operations ops;
  ops.Add()->mutable_put()->set_data("stale");
  OpResults results;
  absl::Status stale = ApplyAndWait(
      *adapter_, WriteTarget{"jobs", 6, "state", ""}, ops, &results);
  ASSERT_TRUE(GetStaleToken(stale).has_value()) << stale;
  EXPECT_EQ(GetStaleToken(stale)->highest_token, 7u);
  EXPECT_FALSE(ReadFile(InRoot("state")).ok());
  results.Clear();
  ASSERT_OK(ApplyAndWait(*adapter_, WriteTarget{"jobs", 9, "state", ""}, ops,
                         &results));
  EXPECT_THAT(other->RaiseFence("jobs", 8),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

// In one group, a write whose change fails (an append past the file size
// limit, standing in for a full disk) fails alone and is cut back; the
// others land.
TEST_F(FileCommitTest, AChangeThatFailsFailsOnlyItsWrite) {
  FENCEGATE_SKIP_WITHOUT_SYNC_POINTS();
  Operations line;
  line.Add()->mutable_append()->set_data("line 1\n");
  OpResults ignored;
  ASSERT_OK(ApplyAndWait(*adapter_, WriteTarget{"logs", 1, "log", ""}, line,
                         &ignored));
  Hold hold = HoldFirstGroup();
  Queued first("first", 1, "first");
  first.ops.Add()->mutable_put()->set_data("1");
  Queued big("logs", 1, "log");
  big.ops.Add()->mutable_append()->set_data(std::string(1 << 20, 'x'));
  Queued small("other", 1, "small");
  small.ops.Add()->mutable_put()->set_data("small");
  {
    ScopedFileSizeLimit limit(64 << 10);
    ASSERT_TRUE(limit.ok());
    ASSERT_NO_FATAL_FAILURE(Start(first));
    hold.taken->WaitForNotification();
    ASSERT_NO_FATAL_FAILURE(Start(big));
    ASSERT_NO_FATAL_FAILURE(Start(small));
    hold.release->Notify();
    big.done.WaitForNotification();
    small.done.WaitForNotification();
  }
  first.done.WaitForNotification();
  EXPECT_OK(first.outcome);
  EXPECT_THAT(big.outcome, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_OK(small.outcome);
  EXPECT_EQ(*ReadFile(InRoot("log")), "line 1\n");
  EXPECT_EQ(*ReadFile(InRoot("small")), "small");
  // The first append created the file, on the calling thread; `first` was
  // held alone, and `big` and `small` were one group.
  EXPECT_EQ(adapter_->commit_counts().groups, 2);
  EXPECT_EQ(adapter_->commit_counts().writes, 3);
}

// Closing the adapter commits the writes still queued, and tells each.
TEST_F(FileCommitTest, ClosingCommitsWhatIsQueued) {
  FENCEGATE_SKIP_WITHOUT_SYNC_POINTS();
  Hold hold = HoldFirstGroup();
  std::vector<std::unique_ptr<Queued>> writes;
  for (int i = 0; i < 4; ++i) {
    writes.push_back(std::make_unique<Queued>(absl::StrCat("domain-", i), 1,
                                              absl::StrCat("f", i)));
    writes.back()->ops.Add()->mutable_put()->set_data("x");
    ASSERT_NO_FATAL_FAILURE(Start(*writes.back()));
  }
  std::thread closer([&] { adapter_.reset(); });
  hold.release->Notify();
  closer.join();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(writes[i]->done.HasBeenNotified()) << i;
    EXPECT_OK(writes[i]->outcome);
    EXPECT_EQ(*ReadFile(InRoot(absl::StrCat("f", i))), "x");
  }
}

}  // namespace
}  // namespace fencegate
