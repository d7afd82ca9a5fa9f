// Copyright fencegate authors.
//
// A file route's fences kept in its root (storage_adapters/file/
// fence_records.h; docs/fencing.md, "The fence in the storage"): adapters
// on one root -- two gateways, or one whose fence store was lost -- refuse
// a token below the root's record; the record is raised before the write
// it admits, so a crash leaves it at least as high as any applied token.

#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "fencegate/common/stale_token.h"
#include "fencegate/common/sync_point.h"
#include "storage_adapters/file/fence_records.h"
#include "storage_adapters/file/file_adapter.h"
#include "tests/file_test_util.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

using ::fencegate::testing::ApplyAndWait;
using ::fencegate::testing::ReadFile;
using ::fencegate::testing::StatusIs;
using ::fencegate::testing::WriteFileOrDie;
using ::testing::HasSubstr;

class FileFenceRecordsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_.path() + "/root";
    a_ = Open();
    b_ = Open();
    ASSERT_NE(a_, nullptr);
    ASSERT_NE(b_, nullptr);
  }
  void TearDown() override { SyncPoint::Get()->ClearAll(); }
  std::unique_ptr<FileAdapter> Open() {
    auto adapter = FileAdapter::Open(root_);
    EXPECT_TRUE(adapter.ok()) << adapter.status();
    return adapter.ok() ? *std::move(adapter) : nullptr;
  }
  // Apply(), or with `grouped` ApplyAsync() through the commit thread.
  static absl::Status Append(FileAdapter& adapter, uint64_t token,
                             const std::string& line,
                             absl::Time deadline = absl::InfiniteFuture(),
                             bool grouped = false) {
    Operations ops;
    ops.Add()->mutable_append()->set_data(line + "\n");
    WriteTarget target{"jobs", token, "log.txt", "", deadline};
    if (absl::Status s = adapter.Validate(target, ops); !s.ok()) return s;
    OpResults results;
    if (grouped) return ApplyAndWait(adapter, target, ops, &results);
    return adapter.Apply(target, ops, &results);
  }
  std::string Log() {
    absl::StatusOr<std::string> text = ReadFile(root_ + "/log.txt");
    return text.ok() ? *text : "";
  }
  // The one record file of the root (64 hex digits).
  std::string RecordPath() {
    for (const auto& e :
         std::filesystem::directory_iterator(root_ + "/.fencegate/fences")) {
      if (e.path().filename().string().size() == 64) return e.path().string();
    }
    return "";
  }
  std::map<std::string, uint64_t> Read(FileAdapter& adapter) {
    std::map<std::string, uint64_t> read;
    absl::Status s =
        adapter.ReadFences([&](absl::string_view domain, uint64_t token) {
          read[std::string(domain)] = token;
        });
    EXPECT_TRUE(s.ok()) << s;
    return read;
  }

  testing::TempDir dir_;
  std::string root_;
  std::unique_ptr<FileAdapter> a_, b_;
};

// Two adapters stand for two gateway processes (flock excludes open file
// descriptions, whichever process holds them), or for a gateway that lost
// its fence store: neither has a fence of its own here.
TEST_F(FileFenceRecordsTest, ATokenBelowTheRootsRecordIsRefused) {
  ASSERT_OK(Append(*a_, 10, "ten"));
  absl::Status stale = Append(*b_, 3, "three");
  ASSERT_TRUE(GetStaleToken(stale).has_value()) << stale;
  EXPECT_EQ(GetStaleToken(stale)->highest_token, 10u);
  ASSERT_OK(Append(*b_, 10, "ten again"));
  EXPECT_EQ(Log(), "ten\nten again\n");
  // A fresh adapter (a restarted gateway) reads the same record.
  std::unique_ptr<FileAdapter> restarted = Open();
  EXPECT_TRUE(GetStaleToken(Append(*restarted, 9, "nine")).has_value());
  EXPECT_EQ(Read(*restarted), (std::map<std::string, uint64_t>{{"jobs", 10}}));
}

TEST_F(FileFenceRecordsTest, RaiseNextAndReadReachTheRecords) {
  ASSERT_OK(a_->RaiseFence("d", 5));
  ASSERT_OK(b_->RaiseFence("d", 5));
  EXPECT_EQ(GetStaleToken(b_->RaiseFence("d", 4))->highest_token, 5u);
  EXPECT_EQ(a_->NextFence("d", 1).value(), 6u);
  EXPECT_EQ(b_->NextFence("d", 10).value(), 10u);
  EXPECT_EQ(b_->NextFence("e", 1).value(), 1u);
  ASSERT_OK(a_->RaiseFence("\xff\n/odd domain", UINT64_MAX));
  EXPECT_THAT(a_->NextFence("\xff\n/odd domain", 1).status(),
              StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_EQ(Read(*a_),
            (std::map<std::string, uint64_t>{
                {"d", 10}, {"e", 1}, {"\xff\n/odd domain", UINT64_MAX}}));
}

TEST_F(FileFenceRecordsTest, TheRecordsDirectoryIsNoResource) {
  Operations ops;
  ops.Add()->mutable_put()->set_data("x");
  for (const char* path : {".fencegate", ".fencegate/fences/x"}) {
    EXPECT_THAT(a_->Validate(WriteTarget{"d", 1, path, ""}, ops),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << path;
  }
  EXPECT_OK(a_->Validate(WriteTarget{"d", 1, "a/.fencegate", ""}, ops));
}

// Another writer holding the domain's record: a write waits for it until
// its deadline, then fails having written nothing.
TEST_F(FileFenceRecordsTest,
       ARecordLockedElsewhereHoldsTheWriteUntilItsDeadline) {
  ASSERT_OK(Append(*a_, 1, "one"));
  const std::string lock_path = RecordPath() + ".lock";
  const int held = ::open(lock_path.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(held, 0);
  ASSERT_EQ(::flock(held, LOCK_EX), 0);
  absl::Status waited =
      Append(*b_, 2, "two", absl::Now() + absl::Milliseconds(200));
  EXPECT_THAT(waited, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(waited.message(), HasSubstr("stayed locked"));
  ::close(held);
  ASSERT_OK(Append(*b_, 2, "two"));
  EXPECT_EQ(Log(), "one\ntwo\n");
}

TEST_F(FileFenceRecordsTest, ABrokenRecordIsDataLossNotAFreshStart) {
  ASSERT_OK(Append(*a_, 7, "seven"));
  WriteFileOrDie(RecordPath(), "fencegate-fence 1\n7\nanother domain");
  EXPECT_THAT(Append(*a_, 7, "again"), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(a_->ReadFences([](absl::string_view, uint64_t) {}),
              StatusIs(absl::StatusCode::kDataLoss));
  WriteFileOrDie(RecordPath(), "garbage");
  EXPECT_THAT(Append(*a_, 8, "eight"), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_EQ(Log(), "seven\n");
}

// kill -9 (an _exit from a sync point) at each step of a write that raises
// the record: the record is never below the token of an applied write.
// Applied on the calling thread (Apply) and through the commit thread
// (ApplyAsync), whose group commits the record and the change with syncs
// of their own.
TEST_F(FileFenceRecordsTest, ACrashAtAnyStepLeavesTheRecordAtLeastAsHigh) {
  FENCEGATE_SKIP_WITHOUT_SYNC_POINTS();
  ASSERT_OK(Append(*a_, 1, "one"));
  uint64_t token = 1;
  for (bool grouped : {false, true}) {
    for (const char* point :
         {"FileFenceRecords::Raise:AfterRename",
          "FileAdapter::Apply:AfterRecord", "FileAdapter::Append:AfterWrite"}) {
      ++token;
      pid_t pid = ::fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        // The parent's commit threads do not exist here: open another
        // adapter for the grouped write.
        (void)a_.release();
        (void)b_.release();
        std::unique_ptr<FileAdapter> own = Open();
        if (own == nullptr) ::_exit(1);
        SyncPoint::Get()->SetCallback(point, [](void*) { ::_exit(42); });
        (void)Append(*own, token, absl::StrCat("line ", token),
                     absl::InfiniteFuture(), grouped);
        ::_exit(0);
      }
      int status = 0;
      ASSERT_EQ(::waitpid(pid, &status, 0), pid);
      ASSERT_TRUE(WIFEXITED(status));
      ASSERT_EQ(WEXITSTATUS(status), 42)
          << point << (grouped ? " (grouped)" : "") << " was not reached";
      std::unique_ptr<FileAdapter> restarted = Open();
      EXPECT_EQ(Read(*restarted)["jobs"], token) << point;
      EXPECT_TRUE(
          GetStaleToken(Append(*restarted, token - 1, "old")).has_value())
          << point;
    }
  }
}

TEST_F(FileFenceRecordsTest, OnlyTemporariesOfEndedProcessesAreRemoved) {
  const std::string mine =
      absl::StrCat(kFileTempPrefix, ::getpid(), "-0123456789abcdef");
  // Above any pid_max: no such process.
  const std::string ended =
      absl::StrCat(kFileTempPrefix, "2147483647-0123456789abcdef");
  const std::string old_form =
      absl::StrCat(kFileTempPrefix, "0123456789abcdef");
  for (const std::string& name : {mine, ended, old_form}) {
    WriteFileOrDie(root_ + "/" + name, "x");
  }
  std::unique_ptr<FileAdapter> reopened = Open();
  EXPECT_EQ(reopened->removed_temporaries(), 2);
  EXPECT_TRUE(std::filesystem::exists(root_ + "/" + mine));
  EXPECT_FALSE(std::filesystem::exists(root_ + "/" + ended));
  EXPECT_FALSE(std::filesystem::exists(root_ + "/" + old_form));
}

}  // namespace
}  // namespace fencegate
