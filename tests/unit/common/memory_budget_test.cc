// Copyright fencegate authors.

#include "fencegate/common/memory_budget.h"

#include <utility>

#include "tests/test_util.h"

namespace fencegate {
namespace {

using ::fencegate::testing::StatusIs;
using ::testing::HasSubstr;

TEST(MemoryBudgetTest, ReservationsAreHeldUntilReleased) {
  MemoryBudget budget(100);
  ASSERT_OK_AND_ASSIGN(first, budget.Reserve(60));
  EXPECT_EQ(budget.used(), 60u);
  absl::StatusOr<MemoryBudget::Reservation> second = budget.Reserve(41);
  EXPECT_THAT(second.status(), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(second.status().message(), HasSubstr("memory_limit_mib"));
  EXPECT_EQ(budget.used(), 60u);  // A refusal holds nothing.
  {
    ASSERT_OK_AND_ASSIGN(fits, budget.Reserve(40));
    EXPECT_EQ(budget.used(), 100u);
    MemoryBudget::Reservation moved = std::move(fits);
    EXPECT_EQ(budget.used(), 100u);
  }
  EXPECT_EQ(budget.used(), 60u);
  first = MemoryBudget::Reservation();
  EXPECT_EQ(budget.used(), 0u);
  EXPECT_THAT(budget.Reserve(101).status(),
              StatusIs(absl::StatusCode::kResourceExhausted));
  ASSERT_OK_AND_ASSIGN(all, budget.Reserve(100));
  EXPECT_EQ(budget.used(), 100u);
}

}  // namespace
}  // namespace fencegate
