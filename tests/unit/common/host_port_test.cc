// Copyright fencegate authors.
//
// ParseHostPort, the one reading of "host:port" (common/host_port.h).

#include "fencegate/common/host_port.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

using ::fencegate::testing::StatusIs;

TEST(HostPortTest, SplitsAtTheLastColonAndReadsBracketedIpv6) {
  ASSERT_OK_AND_ASSIGN(a, ParseHostPort("example.org:5432", "x"));
  EXPECT_EQ(a.host, "example.org");
  EXPECT_EQ(a.port, 5432);
  ASSERT_OK_AND_ASSIGN(b, ParseHostPort("[::1]:0", "x"));
  EXPECT_EQ(b.host, "::1");
  EXPECT_EQ(b.port, 0);
  ASSERT_OK_AND_ASSIGN(c, ParseHostPort(":65535", "x"));
  EXPECT_EQ(c.host, "");
  EXPECT_EQ(c.port, 65535);
  EXPECT_EQ(HostOf("[::1]:80"), "[::1]");
  EXPECT_EQ(HostOf("0.0.0.0:0"), "0.0.0.0");
}

TEST(HostPortTest, RefusesWhatIsNotHostPortNamingIt) {
  for (const char* bad :
       {"example.org", "example.org:", "h:65536", "h:-1", "h:+80", "h:8 0",
        "h:0x50", "h:000080", "::1:80", "[::1:80", "::1]:80", "[[::1]]:80"}) {
    SCOPED_TRACE(bad);
    testing::ExpectError(
        ParseHostPort(bad, "pg.listen:"), absl::StatusCode::kInvalidArgument,
        absl::StrCat("pg.listen: \"", bad, "\" is not host:port"));
  }
  EXPECT_THAT(ParseHostPort(":80", "e", {.need_host = true}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseHostPort("h:0", "e", {.allow_port_zero = false}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_TRUE(ParseHostPort("h:1", "e", {.allow_port_zero = false}).ok());
}

}  // namespace
}  // namespace fencegate
