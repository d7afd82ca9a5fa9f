// Copyright fencegate authors.
//
// The gRPC route against an adversarial caller (docs/security.md): a
// refusal moves no fence anywhere, and what one caller leaves on a pooled
// connection never reaches the next. A gateway process with a PostgreSQL
// route on a real server.

#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/pg_port_fixture.h"

namespace fencegate {
namespace {

using ::testing::HasSubstr;

class RouteHardeningTest : public PgPortTest {};

// Fence(d, 2^63) on a gateway with a PostgreSQL route is refused before
// any fence moves: it used to raise the gateway's own fence past what the
// database can hold, and every later write of the domain was stale.
TEST_F(RouteHardeningTest, ATokenTheDatabaseCannotHoldMovesNoFence) {
  auto g = StartGateway();
  ASSERT_NE(g, nullptr);
  ASSERT_TRUE(Fence(*g, 5).ok());
  const uint64_t too_high =
      static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) + 1;
  grpc::Status s = Fence(*g, too_high);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("no fence was moved"));
  EXPECT_EQ(GetFence(*g), 5u);
  EXPECT_EQ(Exec(absl::StrCat("SELECT token FROM fencegate.fences WHERE "
                              "domain = '",
                              kDomain, "'"))[0][0]
                .as<int64_t>(),
            5);
  // Writes of the holder of 5 still land.
  std::string out, err;
  EXPECT_EQ(Psql(*g, Options(5), {"UPDATE jobs SET owner = 'w5' WHERE id = 1"},
                 &out, &err),
            0)
      << err;
  EXPECT_EQ(Owner(), "w5");
}

}  // namespace
}  // namespace fencegate
