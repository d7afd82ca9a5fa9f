// Copyright fencegate authors.
//
// File versions and preconditions (docs/fencing.md, rule 15): every change
// of a path raises its version, kept across restarts and a delete and
// re-create; if_absent and if_version are checked under the path's lock
// with the change, so that of writers racing on one version exactly one
// wins; a failed precondition changes nothing and carries its own detail;
// a version is raised durably before its change is made. A crash is the
// process ending at a named step (testing::CrashedAt, file_test_util.h).

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/barrier.h"
#include "fencegate/common/precondition_failed.h"
#include "fencegate/common/stale_token.h"
#include "fencegate/common/sync_point.h"
#include "storage_adapters/file/file_adapter.h"
#include "tests/file_test_util.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

using ::fencegate::testing::ApplyAndWait;
using ::fencegate::testing::ReadFile;
using ::testing::HasSubstr;

v1::Operation Put(const std::string& data) {
  v1::Operation op;
  op.mutable_put()->set_data(data);
  return op;
}
v1::Operation Append(const std::string& data) {
  v1::Operation op;
  op.mutable_append()->set_data(data);
  return op;
}
v1::Operation Delete() {
  v1::Operation op;
  op.mutable_delete_();
  return op;
}
v1::Operation IfVersion(v1::Operation op, uint64_t version) {
  op.set_if_version(version);
  return op;
}
v1::Operation IfAbsent(v1::Operation op) {
  op.set_if_absent(true);
  return op;
}

class FileVersionTest : public testing::FileRootTest {
 protected:
  struct Outcome {
    absl::Status status;
    OpResults results;
    bool replayed = false;
    // The version the last result reported.
    uint64_t version() const {
      return results.empty() ? 0 : results.rbegin()->file().version();
    }
  };
  // `ops` on `path` as token 1 of `domain` (and `seq`); with `grouped`,
  // through the commit thread.
  static Outcome Write(FileAdapter& adapter, std::vector<v1::Operation> ops,
                       const std::string& path = "f.txt",
                       const std::string& domain = "jobs", bool grouped = false,
                       uint64_t seq = 0) {
    Outcome out;
    Operations list;
    for (v1::Operation& op : ops) *list.Add() = std::move(op);
    WriteTarget target{domain, 1, path, ""};
    target.seq = seq;
    target.replayed = &out.replayed;
    out.status = adapter.Validate(target, list);
    if (!out.status.ok()) return out;
    out.status = grouped ? ApplyAndWait(adapter, target, list, &out.results)
                         : adapter.Apply(target, list, &out.results);
    return out;
  }
  Outcome Write(v1::Operation op, const std::string& path = "f.txt",
                bool grouped = false) {
    return Write(*adapter_, {std::move(op)}, path, "jobs", grouped);
  }
  std::string File(const std::string& path = "f.txt") {
    absl::StatusOr<std::string> text = ReadFile(root_ + "/" + path);
    return text.ok() ? *text : "<missing>";
  }
  // Runs kRaceWriters writers at once, writer w calling `write(w, adapter)`
  // on `adapter_` or `second` by turns (two gateway processes on one root),
  // started together.
  static constexpr int kRaceWriters = 6;
  void Race(FileAdapter& second,
            const std::function<void(int w, FileAdapter& adapter)>& write) {
    absl::Barrier* start = new absl::Barrier(kRaceWriters);
    std::vector<std::thread> writers;
    for (int w = 0; w < kRaceWriters; ++w) {
      writers.emplace_back([&, w] {
        FileAdapter& adapter = w % 2 == 0 ? *adapter_ : second;
        if (start->Block()) delete start;
        write(w, adapter);
      });
    }
    for (std::thread& t : writers) t.join();
  }
  // How many version files the root keeps.
  int VersionFiles() const {
    int n = 0;
    for (const auto& entry :
         std::filesystem::directory_iterator(root_ + "/.fencegate/versions")) {
      n += entry.is_regular_file() ? 1 : 0;
    }
    return n;
  }
};

TEST_F(FileVersionTest, EveryChangeRaisesTheVersionAcrossRestartsAndRecreate) {
  for (bool grouped : {false, true}) {
    SCOPED_TRACE(grouped ? "through the commit thread" : "on the caller");
    const std::string path = grouped ? "grouped.txt" : "alone.txt";
    EXPECT_EQ(Write(Put("a"), path, grouped).version(), 1u);
    EXPECT_EQ(Write(Append("b"), path, grouped).version(), 2u);
    EXPECT_EQ(Write(Delete(), path, grouped).version(), 3u);
    // Deleting a missing file changes nothing: the version stays.
    Outcome missing = Write(Delete(), path, grouped);
    ASSERT_OK(missing.status);
    EXPECT_FALSE(missing.results[0].file().existed());
    EXPECT_EQ(missing.version(), 3u);
    // Re-created, it continues from the deleted file's version.
    EXPECT_EQ(Write(Append("c"), path, grouped).version(), 4u);
    adapter_.reset();
    adapter_ = Open();
    ASSERT_NE(adapter_, nullptr);
    EXPECT_EQ(Write(Put("d"), path, grouped).version(), 5u);
    EXPECT_EQ(File(path), "d");
  }
  // Each path has its own.
  EXPECT_EQ(Write(Put("x"), "dir/other.txt").version(), 1u);
}

TEST_F(FileVersionTest, IfAbsentAppliesOnlyToAMissingFile) {
  for (bool grouped : {false, true}) {
    const std::string path = grouped ? "g.txt" : "a.txt";
    Outcome first = Write(IfAbsent(Put("first")), path, grouped);
    ASSERT_OK(first.status);
    EXPECT_EQ(first.version(), 1u);
    for (const v1::Operation& op : {Put("second"), Append("more"), Delete()}) {
      Outcome again = Write(IfAbsent(op), path, grouped);
      ASSERT_EQ(again.status.code(), absl::StatusCode::kFailedPrecondition);
      std::optional<PreconditionFailedInfo> failed =
          GetPreconditionFailed(again.status);
      ASSERT_TRUE(failed.has_value()) << again.status;
      EXPECT_EQ(failed->resource, path);
      EXPECT_EQ(failed->op_index, 0);
      EXPECT_TRUE(failed->expected_absent);
      EXPECT_TRUE(failed->exists);
      EXPECT_EQ(failed->version, 1u);
      // Told apart from a stale token by its detail.
      EXPECT_FALSE(GetStaleToken(again.status).has_value());
      EXPECT_EQ(File(path), "first");
    }
  }
  // An append to a missing file, and a delete of one, meet it.
  EXPECT_OK(Write(IfAbsent(Append("new")), "new.txt").status);
  EXPECT_EQ(File("new.txt"), "new");
  EXPECT_OK(Write(IfAbsent(Delete()), "never.txt").status);
}

TEST_F(FileVersionTest, IfVersionAppliesOnlyAtThatVersion) {
  ASSERT_OK(Write(Put("one")).status);
  Outcome stale = Write(IfVersion(Put("lost update"), 0));
  ASSERT_EQ(stale.status.code(), absl::StatusCode::kFailedPrecondition);
  std::optional<PreconditionFailedInfo> failed =
      GetPreconditionFailed(stale.status);
  ASSERT_TRUE(failed.has_value());
  EXPECT_FALSE(failed->expected_absent);
  EXPECT_EQ(failed->expected_version, 0u);
  EXPECT_EQ(failed->version, 1u);
  EXPECT_THAT(stale.status.message(), HasSubstr("if_version 0"));
  EXPECT_EQ(File(), "one");
  EXPECT_EQ(Write(IfVersion(Put("two"), 1)).version(), 2u);
  EXPECT_EQ(Write(IfVersion(Append("+"), 2), "f.txt", true).version(), 3u);
  EXPECT_EQ(Write(IfVersion(Delete(), 3)).version(), 4u);
  // A deleted file keeps its version: a re-create can be made conditional
  // on it.
  EXPECT_EQ(Write(IfVersion(Put("three"), 3)).status.code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(File(), "<missing>");
  EXPECT_EQ(Write(IfVersion(Put("three"), 4)).version(), 5u);
  EXPECT_EQ(File(), "three");
}

TEST_F(FileVersionTest, AFailedPreconditionNamesItsOperation) {
  ASSERT_OK(Write(Put("v1")).status);
  Outcome out = Write(*adapter_, {Append("applied"), IfVersion(Put("no"), 1)});
  ASSERT_EQ(out.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(out.status.message(), HasSubstr("ops[1] (1 of 2"));
  std::optional<PreconditionFailedInfo> failed =
      GetPreconditionFailed(out.status);
  ASSERT_TRUE(failed.has_value());
  EXPECT_EQ(failed->op_index, 1);
  EXPECT_EQ(failed->version, 2u);
  EXPECT_EQ(File(), "v1applied");
}

TEST_F(FileVersionTest, IfAbsentAndIfVersionTogetherAreRefused) {
  v1::Operation both = IfVersion(IfAbsent(Put("x")), 0);
  Outcome out = Write(both);
  EXPECT_EQ(out.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status.message(), HasSubstr("at most one"));
  EXPECT_EQ(File(), "<missing>");
}

// A write that changes nothing leaves no version file behind: a delete of
// a missing file, a failed precondition, on a path never changed. One that
// changed its path keeps its version, deleted or not.
TEST_F(FileVersionTest, WritesThatChangeNothingLeaveNoVersionFile) {
  ASSERT_EQ(VersionFiles(), 0);
  for (bool grouped : {false, true}) {
    Outcome missing = Write(Delete(), "never.txt", grouped);
    ASSERT_OK(missing.status);
    EXPECT_EQ(missing.version(), 0u);
    EXPECT_EQ(Write(IfVersion(Put("x"), 3), "never.txt", grouped).status.code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(
        Write(IfVersion(Append("x"), 1), "never.txt", grouped).status.code(),
        absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(VersionFiles(), 0);
  }
  ASSERT_OK(Write(Put("kept")).status);
  ASSERT_OK(Write(Delete()).status);
  ASSERT_OK(Write(Delete()).status);
  EXPECT_EQ(VersionFiles(), 1);
  EXPECT_EQ(Write(Put("again")).version(), 3u);
}

// A version file is removed under its lock while writers of other domains
// wait on it: each must lock the path's current file, not the removed one.
// Each round, half the writers delete a missing file if its version is 0
// (changing nothing, so removing the version file) and half put it if
// absent: exactly one put wins, and every later writer is told version 1.
TEST_F(FileVersionTest, ARemovedVersionFileIsNeverLockedTwice) {
  std::unique_ptr<FileAdapter> second = Open();
  ASSERT_NE(second, nullptr);
  constexpr int kRounds = 100;
  for (int round = 0; round < kRounds; ++round) {
    const std::string path = absl::StrCat("removed-", round, ".txt");
    std::atomic<int> puts{0};
    Race(*second, [&](int w, FileAdapter& adapter) {
      const bool put = w % 3 != 0;
      Outcome out =
          Write(adapter,
                {put ? IfAbsent(Put(absl::StrCat("writer ", w)))
                     : IfVersion(Delete(), 0)},
                path, absl::StrCat("domain-", w), /*grouped=*/w % 2 == 1);
      if (put && out.status.ok()) ++puts;
    });
    ASSERT_EQ(puts.load(), 1) << "round " << round;
    EXPECT_EQ(Write(IfVersion(Put("check"), 1), path).version(), 2u)
        << "round " << round;
  }
}

// Writers of different domains (which the gateway does not serialize), on
// two adapters of one root (two gateway processes), each put the file if
// its version is the one they all read: each round exactly one wins, and
// the others are told the winner's version.
TEST_F(FileVersionTest, AnIfVersionRaceBetweenWritersHasExactlyOneWinner) {
  std::unique_ptr<FileAdapter> second = Open();
  ASSERT_NE(second, nullptr);
  constexpr int kRounds = 40;
  for (int round = 0; round < kRounds; ++round) {
    const uint64_t version = static_cast<uint64_t>(round);
    std::atomic<int> winners{0};
    std::atomic<int> told_right{0};
    Race(*second, [&](int w, FileAdapter& adapter) {
      Outcome out =
          Write(adapter, {IfVersion(Put(absl::StrCat("writer ", w)), version)},
                "race.txt", absl::StrCat("domain-", w), /*grouped=*/w % 3 == 0);
      if (out.status.ok()) {
        ++winners;
        return;
      }
      std::optional<PreconditionFailedInfo> failed =
          GetPreconditionFailed(out.status);
      if (failed.has_value() && failed->version == version + 1) {
        ++told_right;
      }
    });
    ASSERT_EQ(winners.load(), 1) << "round " << round;
    EXPECT_EQ(told_right.load(), kRaceWriters - 1) << "round " << round;
  }
}

// A retry of a (token, seq) whose write was applied is answered from the
// record, its precondition not checked again: retrying stays safe.
TEST_F(FileVersionTest, ASeqRetryIsAnsweredBeforeItsPrecondition) {
  Outcome first =
      Write(*adapter_, {IfAbsent(Put("once"))}, "f.txt", "jobs", false, 1);
  ASSERT_OK(first.status);
  Outcome retry =
      Write(*adapter_, {IfAbsent(Put("once"))}, "f.txt", "jobs", false, 1);
  ASSERT_OK(retry.status);
  EXPECT_TRUE(retry.replayed);
  EXPECT_EQ(retry.version(), first.version());
  // The next seq is a new write: its precondition is checked.
  EXPECT_EQ(
      Write(*adapter_, {IfAbsent(Put("twice"))}, "f.txt", "jobs", false, 2)
          .status.code(),
      absl::StatusCode::kFailedPrecondition);
}

// A crash after the version was raised and before the change was made
// leaves the version raised and the file as it was; one after the change
// leaves both. Never a change without a raise: a writer holding the old
// version cannot overwrite the change.
TEST_F(FileVersionTest, AVersionIsRaisedDurablyBeforeItsChange) {
  FENCEGATE_SKIP_WITHOUT_SYNC_POINTS();
  for (bool grouped : {false, true}) {
    SCOPED_TRACE(grouped ? "through the commit thread" : "on the caller");
    const uint64_t before = Write(Put("base")).version();
    // The fixture's adapter is closed while the process forks, so that no
    // thread of it runs then (file_test_util.h).
    auto crash_writing = [&](const char* point, v1::Operation op) {
      adapter_.reset();
      const bool crashed = testing::CrashedAt(point, [&] {
        std::unique_ptr<FileAdapter> own = Open();
        if (own != nullptr) {
          (void)Write(*own, {std::move(op)}, "f.txt", "jobs", grouped);
        }
      });
      adapter_ = Open();
      return crashed;
    };
    ASSERT_TRUE(crash_writing("FileAdapter::Put:BeforeRename", Put("lost")));
    EXPECT_EQ(File(), "base");
    ASSERT_TRUE(crash_writing("FileAdapter::Append:AfterWrite", Append("+")));
    EXPECT_EQ(File(), "base+");
    Outcome late = Write(IfVersion(Put("overwrite"), before));
    EXPECT_EQ(late.status.code(), absl::StatusCode::kFailedPrecondition);
    std::optional<PreconditionFailedInfo> failed =
        GetPreconditionFailed(late.status);
    ASSERT_TRUE(failed.has_value());
    EXPECT_EQ(failed->version, before + 2);
    EXPECT_EQ(File(), "base+");
  }
}

}  // namespace
}  // namespace fencegate
