// Copyright fencegate authors.
//
// The token bound of PostgreSQL's fence column and the decoding of a stale
// refusal's DETAIL (postgres/fence_token.h), which both doors share.

#include "postgres/fence_token.h"

#include <cstdint>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "postgres/fence_schema.h"

namespace fencegate::postgres {
namespace {

using ::testing::HasSubstr;

TEST(FenceTokenTest, TheBoundIsBigintsHighest) {
  EXPECT_TRUE(CheckFenceToken(1, "token").ok());
  EXPECT_TRUE(CheckFenceToken(uint64_t{9223372036854775807u}, "token").ok());
  const absl::Status above =
      CheckFenceToken(uint64_t{9223372036854775808u}, "fencegate.token");
  EXPECT_EQ(above.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(above.message(),
              HasSubstr("fencegate.token 9223372036854775808"));
  EXPECT_THAT(above.message(), HasSubstr("at most 9223372036854775807"));
}

TEST(FenceTokenTest, OnlyAStaleRefusalsDetailIsItsToken) {
  EXPECT_EQ(StaleHeldToken(kStaleSqlState, "42"), 42u);
  EXPECT_EQ(StaleHeldToken(kStaleSqlState, "9223372036854775807"),
            uint64_t{9223372036854775807u});
  EXPECT_EQ(StaleHeldToken(kStaleSqlState, nullptr), std::nullopt);
  EXPECT_EQ(StaleHeldToken(kStaleSqlState, "forty-two"), std::nullopt);
  EXPECT_EQ(StaleHeldToken(kStaleSqlState, "-1"), std::nullopt);
  EXPECT_EQ(StaleHeldToken("FG004", "42"), std::nullopt);  // a seq's DETAIL
  EXPECT_EQ(StaleHeldToken("", "42"), std::nullopt);
}

}  // namespace
}  // namespace fencegate::postgres
