// Copyright fencegate authors.
//
// (token, seq) on file routes (docs/fencing.md, rule 14): a Write's seq
// intent is recorded beside its path's version (and its domain's lock file
// names that path) before its change is made, so a retry after a crash at any
// step applies the change once, and an older seq is refused. A crash is the
// process ending at a named step (a forked child that _exits at a sync point,
// as kill -9 would end it: what it wrote to files stays, nothing else runs:
// testing::CrashedAt).

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "fencegate/common/seq_out_of_order.h"
#include "fencegate/common/stale_token.h"
#include "fencegate/common/sync_point.h"
#include "storage_adapters/file/checked_slot.h"
#include "storage_adapters/file/file_adapter.h"
#include "tests/file_test_util.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

using ::fencegate::testing::ApplyAndWait;
using ::fencegate::testing::ReadFile;
using ::testing::HasSubstr;

class FileSeqTest : public testing::FileRootTest {
 protected:
  struct Outcome {
    absl::Status status;
    bool replayed = false;
    OpResults results;
  };
  // One operation on `path` as (token, seq) of `domain`; with `grouped`,
  // through the commit thread.
  static Outcome Write(FileAdapter& adapter, uint64_t token, uint64_t seq,
                       const v1::Operation& op,
                       const std::string& path = "log.txt",
                       bool grouped = false,
                       const std::string& domain = "jobs") {
    Outcome out;
    Operations ops;
    *ops.Add() = op;
    WriteTarget target{domain, token, path, ""};
    target.seq = seq;
    target.replayed = &out.replayed;
    out.status = adapter.Validate(target, ops);
    if (!out.status.ok()) return out;
    out.status = grouped ? ApplyAndWait(adapter, target, ops, &out.results)
                         : adapter.Apply(target, ops, &out.results);
    return out;
  }
  static v1::Operation Append(const std::string& line) {
    v1::Operation op;
    op.mutable_append()->set_data(line + "\n");
    return op;
  }
  static v1::Operation Put(const std::string& data) {
    v1::Operation op;
    op.mutable_put()->set_data(data);
    return op;
  }
  std::string File(const std::string& path = "log.txt") {
    absl::StatusOr<std::string> text = ReadFile(root_ + "/" + path);
    return text.ok() ? *text : "<missing>";
  }

  // Runs `op` as (token, seq) in a child process that ends at `point`.
  // True if it reached the point.
  // The fixture's adapter is closed first, so that no thread of it runs
  // while the process forks (a lock another thread held at the fork would
  // stay locked in the child), and opened again after.
  bool CrashAt(const char* point, uint64_t token, uint64_t seq,
               const v1::Operation& op, bool grouped,
               const std::string& path = "log.txt") {
    adapter_.reset();
    const bool reached = testing::CrashedAt(point, [&] {
      std::unique_ptr<FileAdapter> own = Open();
      if (own != nullptr) (void)Write(*own, token, seq, op, path, grouped);
    });
    adapter_ = Open();
    return reached;
  }
};

// The gateway dies mid-append, at each step; the worker retries with the
// same (token, seq) through a restarted gateway: one line, never two.
TEST_F(FileSeqTest, ARetryAfterACrashMidAppendAppendsOnce) {
  FENCEGATE_SKIP_WITHOUT_SYNC_POINTS();
  ASSERT_OK(Write(*adapter_, 5, 1, Append("first")).status);
  uint64_t token = 5;
  uint64_t seq = 1;
  std::string expected = "first\n";
  struct Step {
    const char* point;
    bool raise;  // The write raises the fence (a new holder's first).
  };
  for (bool grouped : {false, true}) {
    for (const Step& step : {Step{"FileFenceRecords::Raise:AfterRename", true},
                             Step{"FileAdapter::Apply:AfterRecord", false},
                             Step{"FileAdapter::Append:AfterWrite", false},
                             Step{"FileAdapter::Apply:AfterRecord", true},
                             Step{"FileAdapter::Append:AfterWrite", true}}) {
      if (step.raise) {
        ++token;
        seq = 1;
      } else {
        ++seq;
      }
      const std::string where =
          absl::StrCat(step.point, step.raise ? " raising" : "",
                       grouped ? " (grouped)" : "");
      const std::string line = absl::StrCat("line ", token, ".", seq);
      ASSERT_TRUE(CrashAt(step.point, token, seq, Append(line), grouped))
          << where << " was not reached";
      std::unique_ptr<FileAdapter> restarted = Open();
      Outcome retry = Write(*restarted, token, seq, Append(line));
      ASSERT_TRUE(retry.status.ok()) << where << ": " << retry.status;
      absl::StrAppend(&expected, line, "\n");
      EXPECT_EQ(File(), expected) << where;
      // Made before the crash only once its bytes were written.
      EXPECT_EQ(retry.replayed,
                std::string(step.point) == "FileAdapter::Append:AfterWrite")
          << where;
      ASSERT_EQ(retry.results.size(), 1);
      EXPECT_EQ(retry.results[0].file().size(), expected.size()) << where;
      EXPECT_EQ(retry.results[0].file().bytes_written(), line.size() + 1);
      // A second retry is answered from the record, as the last attempt
      // (the one made) was answered.
      Outcome second = Write(*restarted, token, seq, Append(line));
      EXPECT_TRUE(second.replayed) << where;
      ASSERT_EQ(second.results.size(), 1);
      EXPECT_EQ(second.results[0].file().version(),
                retry.results[0].file().version())
          << where;
      EXPECT_EQ(File(), expected) << where;
    }
  }
}

// Bytes of the file under `dir` whose name ends with `suffix`, and its
// path; "" if there is none.
std::string FindUnder(const std::string& dir, const std::string& suffix,
                      std::string* text) {
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::string name = e.path().string();
    if (!absl::EndsWith(name, suffix)) continue;
    absl::StatusOr<std::string> read = ReadFile(name);
    if (!read.ok()) continue;
    *text = *std::move(read);
    return name;
  }
  return "";
}

// Cuts short, as a crash in the middle of its write would leave it, each
// of the two first slots of the files in <root>/.fencegate/<dir> that
// holds one of `needles`; returns how many.
int CutSlotsHolding(const std::string& root, const std::string& dir,
                    const std::vector<std::string>& needles) {
  int cut = 0;
  for (const auto& e : std::filesystem::directory_iterator(
           absl::StrCat(root, "/.fencegate/", dir))) {
    const std::string name = e.path().string();
    absl::StatusOr<std::string> text = ReadFile(name);
    if (!text.ok()) continue;
    for (size_t at = 0;
         at < 2 * kCheckedSlotBytes && at + kCheckedSlotBytes <= text->size();
         at += kCheckedSlotBytes) {
      const std::string bytes = text->substr(at, kCheckedSlotBytes);
      if (std::none_of(needles.begin(), needles.end(),
                       [&](const std::string& needle) {
                         return absl::StrContains(bytes, needle);
                       })) {
        continue;
      }
      std::string torn = bytes.substr(0, 40);
      torn.resize(kCheckedSlotBytes, '\0');
      text->replace(at, kCheckedSlotBytes, torn);
      testing::WriteFileOrDie(name, *text);
      ++cut;
    }
  }
  return cut;
}

// A seq intent slot cut short by a crash fails its checksum: the other
// slot's intent stands, and the write it names is still answered. Intents
// of writes to one path are kept beside its version; of a write moving to
// another path, in the domain's lock file too (fence_records.h): the slot
// the next such write would overwrite is cut.
TEST_F(FileSeqTest, AnIntentSlotCutShortIsIgnored) {
  for (bool moving : {false, true}) {
    SCOPED_TRACE(moving ? "seq 2 to another path" : "both to one path");
    adapter_.reset();
    std::filesystem::remove_all(root_ + "/.fencegate");
    std::filesystem::remove(root_ + "/a");
    std::filesystem::remove(root_ + "/b");
    adapter_ = Open();
    const std::string second = moving ? "b" : "a";
    ASSERT_OK(Write(*adapter_, 5, 1, Append("a"), "a").status);
    ASSERT_OK(Write(*adapter_, 5, 2, Append("b"), second).status);
    // The slots of seq 1 are the ones the next intent would overwrite: cut
    // short there, as a crash in the middle of its write would leave them.
    ASSERT_EQ(CutSlotsHolding(root_, moving ? "fences" : "versions",
                              {" 5 1 ", "\n5 1 "}),
              1);
    adapter_ = Open();
    EXPECT_TRUE(Write(*adapter_, 5, 2, Append("b"), second).replayed);
    EXPECT_TRUE(
        GetSeqOutOfOrder(Write(*adapter_, 5, 1, Append("a"), "a").status)
            .has_value());
    EXPECT_EQ(File("a"), moving ? "a\n" : "a\nb\n");
  }
}

// A domain's seq writes to one path (its home) write their intents beside
// the path's version only, leaving its lock file alone; a write to another
// path moves the home, and the rules hold across the moves.
TEST_F(FileSeqTest, WritesToTheDomainsHomeLeaveItsLockFileAlone) {
  const std::string fences = root_ + "/.fencegate/fences";
  ASSERT_OK(Write(*adapter_, 5, 1, Append("1"), "a").status);
  ASSERT_OK(Write(*adapter_, 5, 2, Append("2"), "b").status);
  std::string before;
  ASSERT_NE(FindUnder(fences, ".lock", &before), "");
  ASSERT_OK(Write(*adapter_, 5, 3, Append("3"), "b").status);
  ASSERT_OK(Write(*adapter_, 5, 4, Append("4"), "b").status);
  std::string after;
  FindUnder(fences, ".lock", &after);
  EXPECT_EQ(after, before);
  adapter_ = Open();
  EXPECT_TRUE(Write(*adapter_, 5, 4, Append("4"), "b").replayed);
  EXPECT_TRUE(GetSeqOutOfOrder(Write(*adapter_, 5, 3, Append("3"), "b").status)
                  .has_value());
  // Back to a: its older intent (seq 1) is not taken for the newest.
  ASSERT_OK(Write(*adapter_, 5, 5, Append("5"), "a").status);
  EXPECT_TRUE(GetSeqOutOfOrder(Write(*adapter_, 5, 4, Append("4"), "b").status)
                  .has_value());
  adapter_ = Open();
  EXPECT_TRUE(Write(*adapter_, 5, 5, Append("5"), "a").replayed);
  EXPECT_EQ(File("a"), "1\n5\n");
  EXPECT_EQ(File("b"), "2\n3\n4\n");
}

// Another domain's writes to a domain's home overwrite the version slots
// its intent was kept in: the intent is copied to the domain's own slot
// first, and a retry is still answered from it.
TEST_F(FileSeqTest, AnIntentOutlivesAnotherDomainsWritesToItsPath) {
  ASSERT_OK(Write(*adapter_, 5, 1, Append("a")).status);
  Outcome jobs = Write(*adapter_, 5, 2, Append("b"));
  ASSERT_OK(jobs.status);
  Outcome other;
  for (uint64_t seq = 1; seq <= 3; ++seq) {
    other = Write(*adapter_, 1, seq, Append(absl::StrCat("o", seq)), "log.txt",
                  /*grouped=*/seq == 2, "other");
    ASSERT_OK(other.status);
  }
  ASSERT_OK(
      Write(*adapter_, 9, 0, Append("x"), "log.txt", false, "third").status);
  adapter_ = Open();
  Outcome retry = Write(*adapter_, 5, 2, Append("b"));
  ASSERT_OK(retry.status);
  EXPECT_TRUE(retry.replayed);
  EXPECT_EQ(retry.results[0].file().version(),
            jobs.results[0].file().version());
  EXPECT_TRUE(
      GetSeqOutOfOrder(Write(*adapter_, 5, 1, Append("a")).status).has_value());
  Outcome other_retry =
      Write(*adapter_, 1, 3, Append("o3"), "log.txt", false, "other");
  EXPECT_TRUE(other_retry.replayed);
  EXPECT_EQ(other_retry.results[0].file().version(),
            other.results[0].file().version());
  EXPECT_EQ(File(), "a\nb\no1\no2\no3\nx\n");
}

// A new holder's first write, its seq intent written, ends before it
// raised the record: its change was never made, and the old holder's
// retry of its last (token, seq) is still answered from its own intent,
// also once another domain's writes have overwritten the version slots.
TEST_F(FileSeqTest, AnIntentOfAWriteThatNeverRaisedTheRecordIsPassedOver) {
  FENCEGATE_SKIP_WITHOUT_SYNC_POINTS();
  ASSERT_OK(Write(*adapter_, 5, 1, Append("a")).status);
  ASSERT_OK(Write(*adapter_, 5, 2, Append("b")).status);
  ASSERT_TRUE(CrashAt("FileAdapter::Apply:BeforeRecord", 6, 1, Append("c"),
                      /*grouped=*/false));
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round == 0 ? "as left" : "after another domain's writes");
    EXPECT_TRUE(Write(*adapter_, 5, 2, Append("b")).replayed);
    EXPECT_TRUE(GetSeqOutOfOrder(Write(*adapter_, 5, 1, Append("a")).status)
                    .has_value());
    EXPECT_THAT(Write(*adapter_, 5, 0, Append("x")).status.message(),
                HasSubstr("carry a seq"));
    for (int i = 0; i < 2; ++i) {
      ASSERT_OK(Write(*adapter_, 1, 0, Append("o"), "log.txt", false, "other")
                    .status);
    }
    adapter_ = Open();
  }
  // The new holder's retry: never made, so applied now.
  Outcome retry = Write(*adapter_, 6, 1, Append("c"));
  ASSERT_OK(retry.status);
  EXPECT_FALSE(retry.replayed);
  EXPECT_EQ(File(), "a\nb\no\no\no\no\nc\n");
}

// A raise of the domain's next seq overwrites the slot of its last one
// while another domain's write holds the other slot, and is cut short (a
// power loss mid-write): the last intent was kept first, and its retry is
// still answered.
TEST_F(FileSeqTest, AnIntentOverwrittenByACutShortRaiseWasKeptFirst) {
  FENCEGATE_SKIP_WITHOUT_SYNC_POINTS();
  ASSERT_OK(Write(*adapter_, 5, 1, Append("a")).status);
  ASSERT_OK(Write(*adapter_, 5, 2, Append("b")).status);
  ASSERT_OK(
      Write(*adapter_, 1, 0, Append("o"), "log.txt", false, "other").status);
  ASSERT_TRUE(CrashAt("FileAdapter::Apply:BeforeRecord", 5, 3, Append("c"),
                      /*grouped=*/false));
  ASSERT_EQ(CutSlotsHolding(root_, "versions", {" 5 3 "}), 1);
  adapter_ = Open();
  EXPECT_TRUE(Write(*adapter_, 5, 2, Append("b")).replayed);
  Outcome retry = Write(*adapter_, 5, 3, Append("c"));
  ASSERT_OK(retry.status);
  EXPECT_FALSE(retry.replayed);
  EXPECT_EQ(File(), "a\nb\no\nc\n");
}

// A put or delete whose outcome was lost, and another domain's change to
// the file since: whether the attempt was made cannot be told from the
// file, so the retry is ABORTED and the other change stands.
TEST_F(FileSeqTest, ARetryAfterAnotherDomainsChangeIsAbortedNotApplied) {
  ASSERT_OK(Write(*adapter_, 5, 1, Put("mine"), "state").status);
  ASSERT_OK(
      Write(*adapter_, 1, 0, Put("theirs"), "state", false, "other").status);
  EXPECT_EQ(Write(*adapter_, 5, 1, Put("mine"), "state").status.code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(File("state"), "theirs");
  v1::Operation del;
  del.mutable_delete_();
  ASSERT_OK(Write(*adapter_, 5, 2, del, "gone").status);  // Nothing there.
  ASSERT_OK(Write(*adapter_, 1, 0, Put("new"), "gone", false, "other").status);
  EXPECT_EQ(Write(*adapter_, 5, 2, del, "gone").status.code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(File("gone"), "new");
}

// A new holder writing the same path as the one before it: its seqs start
// over, and the rules hold for them.
TEST_F(FileSeqTest, ANewTokensSeqsOnTheSamePathFollowTheRules) {
  ASSERT_OK(Write(*adapter_, 5, 1, Append("a")).status);
  ASSERT_OK(Write(*adapter_, 5, 7, Append("b")).status);
  ASSERT_OK(Write(*adapter_, 6, 2, Append("c")).status);
  adapter_ = Open();
  EXPECT_TRUE(Write(*adapter_, 6, 2, Append("c")).replayed);
  EXPECT_TRUE(
      GetSeqOutOfOrder(Write(*adapter_, 6, 1, Append("x")).status).has_value());
  EXPECT_THAT(Write(*adapter_, 6, 0, Append("x")).status.message(),
              HasSubstr("carry a seq"));
  EXPECT_TRUE(
      GetStaleToken(Write(*adapter_, 5, 8, Append("x")).status).has_value());
  EXPECT_EQ(File(), "a\nb\nc\n");
}

// Four domains taking turns on one path, the adapter reopened between
// writes: each displaced intent is kept in its domain's own slot, each
// domain's slots found again, none overwriting another's.
TEST_F(FileSeqTest, IntentsOfDomainsTakingTurnsAreKeptAcrossRestarts) {
  const std::string domains[] = {"d0", "d1", "d2", "d3"};
  auto line = [](const std::string& domain, uint64_t seq) {
    return absl::StrCat(domain, ".", seq);
  };
  std::string expected;
  for (uint64_t seq = 1; seq <= 4; ++seq) {
    for (int d = 0; d < 4; ++d) {
      ASSERT_OK(Write(*adapter_, 3, seq, Append(line(domains[d], seq)),
                      "log.txt", false, domains[d])
                    .status);
      absl::StrAppend(&expected, line(domains[d], seq), "\n");
      adapter_ = Open();
      // Every domain's last write is still answered as a retry.
      for (int e = 0; e < 4; ++e) {
        const uint64_t last = e <= d ? seq : seq - 1;
        if (last == 0) continue;
        EXPECT_TRUE(Write(*adapter_, 3, last, Append(line(domains[e], last)),
                          "log.txt", false, domains[e])
                        .replayed)
            << domains[e] << " seq " << last;
      }
    }
  }
  for (const std::string& domain : domains) {
    EXPECT_TRUE(GetSeqOutOfOrder(Write(*adapter_, 3, 3, Append(line(domain, 3)),
                                       "log.txt", false, domain)
                                     .status)
                    .has_value())
        << domain;
  }
  EXPECT_EQ(File(), expected);
}

// The same crash without a seq: the retry appends the line again. This is
// what the rule prevents, and it shows the test above can see it.
TEST_F(FileSeqTest, WithoutASeqTheRetryAfterACrashAppendsTwice) {
  FENCEGATE_SKIP_WITHOUT_SYNC_POINTS();
  ASSERT_TRUE(CrashAt("FileAdapter::Append:AfterWrite", 5, 0, Append("pay"),
                      /*grouped=*/false));
  std::unique_ptr<FileAdapter> restarted = Open();
  ASSERT_OK(Write(*restarted, 5, 0, Append("pay")).status);
  EXPECT_EQ(File(), "pay\npay\n");
}

// An append cut short by the crash (part of its bytes written) is taken
// back and made whole by the retry.
TEST_F(FileSeqTest, APartialAppendIsCutBackAndMadeOnce) {
  FENCEGATE_SKIP_WITHOUT_SYNC_POINTS();
  ASSERT_OK(Write(*adapter_, 5, 1, Append("first")).status);
  // What a crash mid-write leaves: the intent recorded, part of the bytes.
  ASSERT_TRUE(CrashAt("FileAdapter::Apply:AfterRecord", 5, 2, Append("second"),
                      /*grouped=*/false));
  {
    FILE* f = std::fopen((root_ + "/log.txt").c_str(), "a");
    ASSERT_NE(f, nullptr);
    std::fputs("sec", f);
    std::fclose(f);
  }
  std::unique_ptr<FileAdapter> restarted = Open();
  Outcome retry = Write(*restarted, 5, 2, Append("second"));
  ASSERT_OK(retry.status);
  EXPECT_FALSE(retry.replayed);
  EXPECT_EQ(File(), "first\nsecond\n");
}

TEST_F(FileSeqTest, AnOlderSeqIsRefusedAndGapsAreAllowed) {
  ASSERT_OK(Write(*adapter_, 5, 3, Append("a")).status);
  Outcome older = Write(*adapter_, 5, 2, Append("b"));
  std::optional<SeqOutOfOrderInfo> info = GetSeqOutOfOrder(older.status);
  ASSERT_TRUE(info.has_value()) << older.status;
  EXPECT_EQ(info->last_seq, 3u);
  EXPECT_FALSE(GetStaleToken(older.status).has_value());
  ASSERT_OK(Write(*adapter_, 5, 9, Append("c")).status);
  EXPECT_EQ(File(), "a\nc\n");
  // A new token starts its own seq; the old one is stale.
  ASSERT_OK(Write(*adapter_, 6, 1, Append("d")).status);
  EXPECT_TRUE(
      GetStaleToken(Write(*adapter_, 5, 10, Append("e")).status).has_value());
  EXPECT_EQ(File(), "a\nc\nd\n");
}

// Once a token's writes carry a seq on a file route, a write without one,
// or the same seq naming another write, could not be told from a retry.
TEST_F(FileSeqTest, ASeqNamesOneWriteAndATokenWithSeqsNeedsThem) {
  ASSERT_OK(Write(*adapter_, 5, 1, Append("a")).status);
  Outcome other = Write(*adapter_, 5, 1, Append("b"));
  EXPECT_EQ(other.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.status.message(), HasSubstr("another write"));
  Outcome without = Write(*adapter_, 5, 0, Append("c"));
  EXPECT_EQ(without.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(without.status.message(), HasSubstr("carry a seq"));
  EXPECT_EQ(File(), "a\n");
  // A new holder (a raised fence) may write without.
  ASSERT_OK(adapter_->RaiseFence("jobs", 6));
  ASSERT_OK(Write(*adapter_, 6, 0, Append("d")).status);
  EXPECT_EQ(File(), "a\nd\n");
}

// Put and delete: a retry of a change already made is answered as it was.
TEST_F(FileSeqTest, PutAndDeleteRetriesAreAnsweredFromTheRecord) {
  ASSERT_OK(Write(*adapter_, 5, 1, Put("v1"), "state").status);
  Outcome put = Write(*adapter_, 5, 2, Put("v2"), "state", /*grouped=*/true);
  ASSERT_OK(put.status);
  Outcome again = Write(*adapter_, 5, 2, Put("v2"), "state");
  ASSERT_OK(again.status);
  EXPECT_TRUE(again.replayed);
  ASSERT_EQ(again.results.size(), 1);
  EXPECT_TRUE(again.results[0].file().existed());
  EXPECT_EQ(again.results[0].file().size(), 2u);
  v1::Operation del;
  del.mutable_delete_();
  ASSERT_OK(Write(*adapter_, 5, 3, del, "state").status);
  Outcome deleted = Write(*adapter_, 5, 3, del, "state");
  ASSERT_OK(deleted.status);
  EXPECT_TRUE(deleted.replayed);
  EXPECT_TRUE(deleted.results[0].file().existed());
  EXPECT_EQ(File("state"), "<missing>");
}

TEST_F(FileSeqTest, AWriteWithASeqTakesOneOperation) {
  Operations ops;
  *ops.Add() = Append("a");
  *ops.Add() = Append("b");
  WriteTarget target{"jobs", 5, "log.txt", ""};
  target.seq = 1;
  EXPECT_EQ(adapter_->Validate(target, ops).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fencegate
