// Copyright fencegate authors.

#include "storage_adapters/file/file_adapter.h"

#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "absl/strings/match.h"
#include "fencegate/common/sync_point.h"
#include "storage_adapters/builtin.h"
#include "storage_adapters/registry.h"
#include "tests/file_test_util.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

using ::fencegate::testing::ApplyAndWait;
using ::fencegate::testing::ReadFile;
using ::fencegate::testing::ScopedFileSizeLimit;
using ::fencegate::testing::StatusIs;
using ::fencegate::testing::WriteFileOrDie;

class FileAdapterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_.path() + "/root";
    outside_ = dir_.path() + "/outside";
    ASSERT_EQ(::mkdir(outside_.c_str(), 0755), 0);
    WriteFileOrDie(outside_ + "/secret", "secret");
    auto adapter = FileAdapter::Open(root_);
    ASSERT_TRUE(adapter.ok()) << adapter.status();
    adapter_ = *std::move(adapter);
  }
  void TearDown() override { SyncPoint::Get()->ClearAll(); }

  absl::Status Apply(const std::string& path, const Operations& ops,
                     OpResults* results = nullptr) {
    OpResults local;
    WriteTarget target{"d", 1, path, ""};
    if (absl::Status s = adapter_->Validate(target, ops); !s.ok()) return s;
    return adapter_->Apply(target, ops, results ? results : &local);
  }
  absl::Status Put(const std::string& path, const std::string& data) {
    Operations ops;
    ops.Add()->mutable_put()->set_data(data);
    return Apply(path, ops);
  }
  absl::Status Append(const std::string& path, const std::string& data) {
    Operations ops;
    ops.Add()->mutable_append()->set_data(data);
    return Apply(path, ops);
  }
  absl::Status Delete(const std::string& path, bool* existed = nullptr) {
    Operations ops;
    ops.Add()->mutable_delete_();
    OpResults results;
    absl::Status s = Apply(path, ops, &results);
    if (existed != nullptr && results.size() == 1) {
      *existed = results[0].file().existed();
    }
    return s;
  }
  std::string InRoot(const std::string& path) { return root_ + "/" + path; }
  bool TempFilesLeft(const std::string& dir) {
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      if (absl::StartsWith(e.path().filename().string(), kFileTempPrefix)) {
        return true;
      }
    }
    return false;
  }

  testing::TempDir dir_;
  std::string root_, outside_;
  std::unique_ptr<FileAdapter> adapter_;
};

TEST_F(FileAdapterTest, PutAppendDelete) {
  ASSERT_OK(Put("reports/daily.csv", "a,b\n"));
  EXPECT_EQ(*ReadFile(InRoot("reports/daily.csv")), "a,b\n");
  ASSERT_OK(Put("reports/daily.csv", "c\n"));  // Replaces.
  EXPECT_EQ(*ReadFile(InRoot("reports/daily.csv")), "c\n");
  ASSERT_OK(Append("reports/daily.csv", "d\n"));
  EXPECT_EQ(*ReadFile(InRoot("reports/daily.csv")), "c\nd\n");
  bool existed = false;
  ASSERT_OK(Delete("reports/daily.csv", &existed));
  EXPECT_TRUE(existed);
  EXPECT_FALSE(ReadFile(InRoot("reports/daily.csv")).ok());
  ASSERT_OK(Delete("reports/daily.csv", &existed));  // Retry-safe.
  EXPECT_FALSE(existed);
  ASSERT_OK(Delete("no/such/dir/file", &existed));
  EXPECT_FALSE(existed);
  EXPECT_FALSE(TempFilesLeft(InRoot("reports")));
}

TEST_F(FileAdapterTest, AppendCreatesFileAndDirectories) {
  ASSERT_OK(Append("logs/2026/11/run.log", "one\n"));
  ASSERT_OK(Append("logs/2026/11/run.log", "two\n"));
  EXPECT_EQ(*ReadFile(InRoot("logs/2026/11/run.log")), "one\ntwo\n");
}

TEST_F(FileAdapterTest, OperationsApplyInOrderWithResults) {
  Operations ops;
  ops.Add()->mutable_put()->set_data("12345");
  ops.Add()->mutable_append()->set_data("678");
  ops.Add()->mutable_append()->set_data("9");
  OpResults results;
  ASSERT_OK(Apply("n.txt", ops, &results));
  ASSERT_EQ(results.size(), 3);
  EXPECT_FALSE(results[0].file().existed());
  EXPECT_EQ(results[0].file().size(), 5u);
  EXPECT_TRUE(results[1].file().existed());
  EXPECT_EQ(results[1].file().size(), 8u);
  EXPECT_EQ(results[2].file().size(), 9u);
  EXPECT_EQ(results[2].file().bytes_written(), 1u);
  EXPECT_EQ(*ReadFile(InRoot("n.txt")), "123456789");
}

TEST_F(FileAdapterTest, LexicalTraversalIsRefused) {
  for (const char* bad : {"", "/etc/passwd", "../outside/secret",
                          "a/../../outside/secret", "a/./b", "a//b", "a/", ".",
                          "..", ".fencegate-tmp-x", "a/.fencegate-tmp-y"}) {
    EXPECT_THAT(Put(bad, "x"), StatusIs(absl::StatusCode::kInvalidArgument))
        << bad;
  }
  EXPECT_THAT(Put(std::string("a\0b", 3), "x"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Put(std::string(4097, 'a'), "x"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(*ReadFile(outside_ + "/secret"), "secret");
}

TEST_F(FileAdapterTest, SymlinkEscapesAreRefused) {
  // A directory symlink leading out of the root.
  ASSERT_EQ(::symlink(outside_.c_str(), InRoot("escape").c_str()), 0);
  EXPECT_THAT(Put("escape/secret", "pwned"),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(Append("escape/secret", "pwned"),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(Delete("escape/secret"),
              StatusIs(absl::StatusCode::kPermissionDenied));
  // A relative one climbing out.
  ASSERT_EQ(::symlink("../outside", InRoot("up").c_str()), 0);
  EXPECT_THAT(Append("up/secret", "pwned"),
              StatusIs(absl::StatusCode::kPermissionDenied));
  // A file symlink leading out: append must not follow it out.
  ASSERT_EQ(::symlink((outside_ + "/secret").c_str(),
                      InRoot("link-to-secret").c_str()),
            0);
  EXPECT_THAT(Append("link-to-secret", "pwned"),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(*ReadFile(outside_ + "/secret"), "secret");
  // Put replaces the link itself, never the file it points to.
  ASSERT_OK(Put("link-to-secret", "mine"));
  EXPECT_EQ(*ReadFile(outside_ + "/secret"), "secret");
  EXPECT_EQ(*ReadFile(InRoot("link-to-secret")), "mine");
}

// A file system mounted beneath the root is not reached: the root's syncfs
// would not make a write there durable.
TEST_F(FileAdapterTest, AMountBeneathTheRootIsRefused) {
  ASSERT_EQ(::mkdir(InRoot("mnt").c_str(), 0755), 0);
  if (::mount("none", InRoot("mnt").c_str(), "tmpfs", 0, nullptr) != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here: " << strerror(errno);
  }
  EXPECT_THAT(Put("mnt/x", "data"),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(Append("mnt/x", "data"),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_FALSE(std::filesystem::exists(InRoot("mnt/x")));
  ASSERT_EQ(::umount(InRoot("mnt").c_str()), 0);
  ASSERT_OK(Put("mnt/x", "data"));  // The same path, on the root's own.
}

TEST_F(FileAdapterTest, SymlinksInsideTheRootAreFollowed) {
  ASSERT_OK(Put("real/data.txt", "v1"));
  ASSERT_EQ(::symlink("real", InRoot("alias").c_str()), 0);
  ASSERT_OK(Append("alias/data.txt", "+v2"));
  EXPECT_EQ(*ReadFile(InRoot("real/data.txt")), "v1+v2");
}

TEST_F(FileAdapterTest, PutOverDirectoryIsRefused) {
  ASSERT_OK(Put("dir/file", "x"));
  EXPECT_THAT(Put("dir", "x"), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(Append("dir", "x"),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(Put("dir/file/below", "x"),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  bool existed = true;
  ASSERT_OK(Delete("dir/file/below", &existed));
  EXPECT_FALSE(existed);
}

TEST_F(FileAdapterTest, AppendToFifoIsRefusedWithoutBlocking) {
  ASSERT_EQ(::mkfifo(InRoot("pipe").c_str(), 0644), 0);
  EXPECT_THAT(Append("pipe", "x"),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(FileAdapterTest, ValidateRefusesNonFileOperations) {
  Operations ops;
  ops.Add();  // No operation set.
  EXPECT_THAT(adapter_->Validate(WriteTarget{"d", 1, "a", ""}, ops),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// A process killed between writing the temporary file and renaming it over
// the target leaves the old contents intact and complete.
TEST_F(FileAdapterTest, CrashDuringPutLeavesOldContents) {
  FENCEGATE_SKIP_WITHOUT_SYNC_POINTS();
  ASSERT_OK(Put("state.json", "{\"v\":1}"));
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    SyncPoint::Get()->SetCallback("FileAdapter::Put:BeforeRename",
                                  [](void*) { ::_exit(42); });
    (void)Put("state.json", std::string(1 << 20, 'x'));
    ::_exit(0);  // Not reached when sync points are compiled in.
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 42) << "the put did not reach the crash point";
  EXPECT_EQ(*ReadFile(InRoot("state.json")), "{\"v\":1}");
  // The next put succeeds; the stray temporary is removed at the next start.
  ASSERT_OK(Put("state.json", "{\"v\":2}"));
  EXPECT_EQ(*ReadFile(InRoot("state.json")), "{\"v\":2}");
  ASSERT_TRUE(TempFilesLeft(root_));
  adapter_.reset();
  ASSERT_OK_AND_ASSIGN(reopened, FileAdapter::Open(root_));
  EXPECT_EQ(reopened->removed_temporaries(), 1);
  EXPECT_FALSE(TempFilesLeft(root_));
  EXPECT_EQ(*ReadFile(InRoot("state.json")), "{\"v\":2}");
}

// The same through the commit thread: a process killed after a grouped
// put's temporary was made durable and before its rename keeps the old
// contents.
TEST_F(FileAdapterTest, CrashBeforeAGroupedPutsRenameLeavesOldContents) {
  FENCEGATE_SKIP_WITHOUT_SYNC_POINTS();
  ASSERT_OK(Put("state.json", "{\"v\":1}"));
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The parent's commit thread does not exist here: open another adapter.
    (void)adapter_.release();
    absl::StatusOr<std::unique_ptr<FileAdapter>> own = FileAdapter::Open(root_);
    if (!own.ok()) ::_exit(1);
    SyncPoint::Get()->SetCallback("FileAdapter::Put:BeforeRename",
                                  [](void*) { ::_exit(42); });
    Operations ops;
    ops.Add()->mutable_put()->set_data(std::string(1 << 20, 'x'));
    OpResults results;
    (void)ApplyAndWait(**own, WriteTarget{"d", 1, "state.json", ""}, ops,
                       &results);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 42) << "the put did not reach the crash point";
  EXPECT_EQ(*ReadFile(InRoot("state.json")), "{\"v\":1}");
}

// Leftover temporaries anywhere beneath the root are removed when the
// adapter opens; other files, and anything reached through a symlink, stay.
TEST_F(FileAdapterTest, LeftoverTemporariesAreRemovedAtOpen) {
  ASSERT_OK(Put("a/b/keep.txt", "keep"));
  const std::string tmp = std::string(kFileTempPrefix) + "0123456789abcdef";
  WriteFileOrDie(InRoot(tmp), "x");
  WriteFileOrDie(InRoot("a/b/" + tmp), "x");
  WriteFileOrDie(outside_ + "/" + tmp, "outside");
  ASSERT_EQ(::symlink(outside_.c_str(), InRoot("a/link").c_str()), 0);
  // A symlink named like a temporary is not the adapter's: it stays, and so
  // does what it points to.
  ASSERT_EQ(::symlink((outside_ + "/" + tmp).c_str(),
                      InRoot("a/" + tmp + "0").c_str()),
            0);
  adapter_.reset();
  ASSERT_OK_AND_ASSIGN(reopened, FileAdapter::Open(root_));
  EXPECT_EQ(reopened->removed_temporaries(), 2);
  EXPECT_FALSE(TempFilesLeft(root_));
  EXPECT_FALSE(TempFilesLeft(InRoot("a/b")));
  EXPECT_EQ(*ReadFile(InRoot("a/b/keep.txt")), "keep");
  EXPECT_EQ(*ReadFile(outside_ + "/" + tmp), "outside");
  struct stat st;
  EXPECT_EQ(::lstat(InRoot("a/" + tmp + "0").c_str(), &st), 0);
}

// A put that runs out of space fails RESOURCE_EXHAUSTED and leaves the old
// contents and no temporary file.
TEST_F(FileAdapterTest, PutOnAFullDiskLeavesNoPartialFile) {
  ASSERT_OK(Put("state.json", "old"));
  {
    ScopedFileSizeLimit limit(64 << 10);
    ASSERT_TRUE(limit.ok());
    EXPECT_THAT(Put("state.json", std::string(1 << 20, 'x')),
                StatusIs(absl::StatusCode::kResourceExhausted));
    EXPECT_THAT(Put("new.json", std::string(1 << 20, 'x')),
                StatusIs(absl::StatusCode::kResourceExhausted));
  }
  EXPECT_EQ(*ReadFile(InRoot("state.json")), "old");
  EXPECT_FALSE(std::filesystem::exists(InRoot("new.json")));
  EXPECT_FALSE(TempFilesLeft(root_));
}

// An append that runs out of space part-way is cut back: no torn tail.
TEST_F(FileAdapterTest, AppendOnAFullDiskLeavesNoTornTail) {
  ASSERT_OK(Append("log", "line 1\n"));
  {
    ScopedFileSizeLimit limit(64 << 10);
    ASSERT_TRUE(limit.ok());
    EXPECT_THAT(Append("log", std::string(1 << 20, 'x')),
                StatusIs(absl::StatusCode::kResourceExhausted));
  }
  EXPECT_EQ(*ReadFile(InRoot("log")), "line 1\n");
  ASSERT_OK(Append("log", "line 2\n"));
  EXPECT_EQ(*ReadFile(InRoot("log")), "line 1\nline 2\n");
}

TEST(FileAdapterUriTest, RegistryBuildsFromUri) {
  testing::TempDir dir;
  AdapterRegistry registry;
  ASSERT_OK(RegisterBuiltinAdapters(&registry));
  EXPECT_OK(registry.Create("file://" + dir.path() + "/files").status());
  EXPECT_THAT(registry.Create("file://host/x"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(registry.Create("file://relative"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(registry.Create("file:///tmp/x?sync=0"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(registry.Create("s3://bucket/x"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(registry.Create("no-scheme"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_OK(registry.Create("noop://").status());
  EXPECT_THAT(registry.Create("noop://x"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace fencegate
