// Copyright fencegate authors.
//
// The chaos checker catches what it must: a stale write, a lost row, a
// duplicate, a refused write that landed; and it allows what it must: an
// unacknowledged write that landed, and a write in flight while a higher
// token was acknowledged.

#include "bench/chaos_checker.h"

#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace fencegate::bench {
namespace {

using Outcome = WriteRecord::Outcome;

class ChaosCheckerTest : public ::testing::Test {
 protected:
  // Holder 1 writes ids 1, 2 with token 5; holder 2 fences 7 at t=300 and
  // writes id 3 with token 7; holder 1's late write (id 4, token 5, sent at
  // t=400) is refused.
  void SetUp() override {
    writes_ = {
        {"pg", "d", 1, 5, Outcome::kAcknowledged, 100, 110},
        {"pg", "d", 2, 5, Outcome::kAcknowledged, 200, 210},
        {"pg", "d", 3, 7, Outcome::kAcknowledged, 310, 320},
        {"pg", "d", 4, 5, Outcome::kRefusedStale, 400, 410},
        {"file", "d", 5, 7, Outcome::kAcknowledged, 330, 340},
    };
    fences_ = {{"d", 7, 300}};
    applied_ = {{"pg", "d", 5, 1},
                {"pg", "d", 5, 2},
                {"pg", "d", 7, 3},
                {"file", "d", 7, 5}};
  }
  ChaosCounts Check() const { return CheckChaos(writes_, fences_, applied_); }

  std::vector<WriteRecord> writes_;
  std::vector<FenceRecord> fences_;
  std::vector<AppliedWrite> applied_;
};

TEST_F(ChaosCheckerTest, ACleanHistoryHasNoViolation) {
  const ChaosCounts c = Check();
  EXPECT_EQ(c.violations(), 0u);
  EXPECT_EQ(c.acknowledged, 4u);
  EXPECT_EQ(c.refused_stale, 1u);
  EXPECT_EQ(c.fences, 1u);
  EXPECT_EQ(c.applied, 4u);
}

// A write sent after a higher token's Fence was acknowledged is stale even
// when nothing in its own history is higher yet: only the Fence record
// catches it (the file's token-7 write is acknowledged later, at 340).
TEST_F(ChaosCheckerTest, AStaleLineAfterAFenceIsFlagged) {
  writes_.push_back({"file", "d", 6, 6, Outcome::kAcknowledged, 320, 325});
  applied_.insert(applied_.begin() + 3, {"file", "d", 6, 6});
  EXPECT_EQ(Check().stale_applied, 1u);
  fences_.clear();  // Without the Fence it would pass: the rule is the fence.
  EXPECT_EQ(Check().stale_applied, 0u);
}

TEST_F(ChaosCheckerTest, ALowerTokenAfterAHigherOneInTheHistoryIsFlagged) {
  writes_.push_back({"pg", "e", 10, 9, Outcome::kAcknowledged, 10, 20});
  writes_.push_back({"pg", "e", 11, 8, Outcome::kError, 5, 30});
  applied_.push_back({"pg", "e", 9, 10});
  applied_.push_back({"pg", "e", 8, 11});
  const ChaosCounts c = Check();
  EXPECT_EQ(c.stale_applied, 1u);
  EXPECT_EQ(c.unacknowledged_landed, 1u);
}

TEST_F(ChaosCheckerTest, ALostRowIsFlagged) {
  applied_.erase(applied_.begin() + 1);  // Acknowledged id 2.
  const ChaosCounts c = Check();
  EXPECT_EQ(c.lost_acknowledged, 1u);
  EXPECT_EQ(c.violations(), 1u);
}

TEST_F(ChaosCheckerTest, ADuplicateIsFlagged) {
  applied_.push_back({"pg", "d", 7, 3});
  const ChaosCounts c = Check();
  EXPECT_EQ(c.duplicates, 1u);
  EXPECT_EQ(c.violations(), 1u);
}

TEST_F(ChaosCheckerTest, ARefusedWriteThatLandedIsFlagged) {
  applied_.push_back({"pg", "d", 5, 4});
  const ChaosCounts c = Check();
  EXPECT_EQ(c.refused_landed, 1u);
  // Sent at 400, after 7 was acknowledged at 300 (fence) and 320 (write).
  EXPECT_EQ(c.stale_applied, 1u);
}

// Unacknowledged writes may land (the gateway died after applying them);
// they are counted, not failed.
TEST_F(ChaosCheckerTest, AnUnacknowledgedWriteMayLand) {
  writes_.push_back({"pg", "d", 8, 7, Outcome::kError, 500, 510});
  applied_.push_back({"pg", "d", 7, 8});
  const ChaosCounts c = Check();
  EXPECT_EQ(c.unacknowledged_landed, 1u);
  EXPECT_EQ(c.violations(), 0u);
}

// A write sent before the higher token's ack was in flight with it: it may
// be applied after the fence's ack without breaking anything, as long as
// the history's order holds.
TEST_F(ChaosCheckerTest, AWriteInFlightDuringTheFenceMayLand) {
  writes_.push_back({"file", "d", 9, 6, Outcome::kAcknowledged, 290, 335});
  applied_.insert(applied_.begin() + 3, {"file", "d", 6, 9});
  EXPECT_EQ(Check().violations(), 0u);
}

// A write's row and its file line share an id: neither is a duplicate of
// the other.
TEST_F(ChaosCheckerTest, ARowAndAFileLineOfOneWriteAreNoDuplicate) {
  writes_.push_back({"pg", "d", 5, 7, Outcome::kAcknowledged, 330, 345});
  applied_.push_back({"pg", "d", 7, 5});
  const ChaosCounts c = Check();
  EXPECT_EQ(c.duplicates, 0u);
  EXPECT_EQ(c.violations(), 0u);
}

TEST_F(ChaosCheckerTest, AnUnknownRowIsFlagged) {
  applied_.push_back({"pg", "d", 7, 99});
  EXPECT_EQ(Check().unknown_applied, 1u);
}

TEST(ChaosRecordsTest, RecordsRoundTrip) {
  const WriteRecord w{"pg", "jobs/a", 42, 7, Outcome::kRefusedStale, 1, 2};
  const FenceRecord f{"jobs/a", 9, 3};
  std::vector<WriteRecord> writes;
  std::vector<FenceRecord> fences;
  ASSERT_OK(ParseRecords(FormatRecord(w) + FormatRecord(f), &writes, &fences));
  ASSERT_EQ(writes.size(), 1u);
  ASSERT_EQ(fences.size(), 1u);
  EXPECT_EQ(writes[0].domain, "jobs/a");
  EXPECT_EQ(writes[0].write_id, 42);
  EXPECT_EQ(writes[0].outcome, Outcome::kRefusedStale);
  EXPECT_EQ(fences[0].token, 9u);
  EXPECT_FALSE(ParseRecords("W pg d x 1 a 1 2\n", &writes, &fences).ok());
  EXPECT_FALSE(ParseRecords("   \n", &writes, &fences).ok());
  EXPECT_FALSE(ParseRecords("Q\n", &writes, &fences).ok());
}

}  // namespace
}  // namespace fencegate::bench
