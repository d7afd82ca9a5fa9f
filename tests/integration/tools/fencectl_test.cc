// Copyright fencegate authors.
//
// fencectl's command line, without a gateway: its own subcommands and help,
// its usage errors (exit code 2), '-' and '_' alike in flag names, and what
// it links (the client libraries, not the server's).

#include <string>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

using ::fencegate::testing::RunCommand;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(FencectlTest, LinksNoServerLibrary) {
  std::string out;
  ASSERT_EQ(RunCommand({"/usr/bin/ldd", FENCECTL_BIN}, &out), 0);
  EXPECT_THAT(out, HasSubstr("libgrpc++"));  // The check reads ldd's list.
  EXPECT_THAT(out, Not(HasSubstr("rocksdb")));
  EXPECT_THAT(out, Not(HasSubstr("libsystemd")));
}

TEST(FencectlTest, EachCommandHasItsOwnHelp) {
  std::string out;
  ASSERT_EQ(RunCommand({FENCECTL_BIN, "--help"}, &out), 0);
  for (const char* command :
       {"write", "fence", "get", "sequence", "lock", "health", "pg-setup"}) {
    EXPECT_THAT(out, HasSubstr(command));
  }
  EXPECT_THAT(out, HasSubstr("Exit codes"));
  out.clear();
  ASSERT_EQ(RunCommand({FENCECTL_BIN, "write", "--help"}, &out), 0);
  EXPECT_THAT(out, HasSubstr("--resource"));
  EXPECT_THAT(out, Not(HasSubstr("--admin_dsn")));
  out.clear();
  ASSERT_EQ(RunCommand({FENCECTL_BIN, "pg-setup", "--help"}, &out), 0);
  EXPECT_THAT(out, HasSubstr("--admin_dsn"));
  EXPECT_THAT(out, Not(HasSubstr("--resource")));
}

TEST(FencectlTest, UsageErrorsExitWithTwo) {
  std::string out, err;
  const std::string addr = "--addr=127.0.0.1:1";
  EXPECT_EQ(RunCommand({FENCECTL_BIN, addr}, &out, &err), 2);
  EXPECT_EQ(RunCommand({FENCECTL_BIN, addr, "frobnicate"}, &out, &err), 2);
  EXPECT_EQ(RunCommand({FENCECTL_BIN, addr, "fence", "--domain=d"}, &out, &err),
            2)
      << "no --token";
  EXPECT_EQ(RunCommand({FENCECTL_BIN, addr, "write", "--token=1",
                        "--resource=files/x"},
                       &out, &err),
            2)
      << "no operation";
  EXPECT_EQ(RunCommand({FENCECTL_BIN, addr, "write", "--token=1",
                        "--resource=files/x", "--put=a", "--delete"},
                       &out, &err),
            2)
      << "two operations";
  EXPECT_EQ(RunCommand({FENCECTL_BIN, addr, "write", "--token=1",
                        "--resource=files/x", "--put=a", "--param=int64:1"},
                       &out, &err),
            2)
      << "--param without --sql";
  err.clear();
  // A command's flag before the command is refused, and the error says
  // where it goes.
  EXPECT_EQ(RunCommand({FENCECTL_BIN, addr, "--wait-ms=0", "lock", "jobs", "--",
                        "/bin/true"},
                       &out, &err),
            2);
  EXPECT_THAT(err, HasSubstr("go after"));
  EXPECT_EQ(RunCommand({FENCECTL_BIN, addr, "lock", "jobs"}, &out, &err), 2)
      << "no command to run";
  EXPECT_EQ(RunCommand({FENCECTL_BIN, "pg-setup", "--role=r"}, &out, &err), 2)
      << "no --admin_dsn";
  err.clear();
  // Who keeps the session functions means nothing without the revoke:
  // refused before connecting.
  EXPECT_EQ(RunCommand({FENCECTL_BIN, "pg-setup", "--admin_dsn=host=/nowhere",
                        "--role=r", "--session-functions-for=other_app"},
                       &out, &err),
            2);
  EXPECT_THAT(err, HasSubstr("needs --revoke_session_functions"));
}

TEST(FencectlTest, DashesAndUnderscoresInFlagNamesAreTheSame) {
  // Both spellings reach the same flag: the file is read (and is missing)
  // before any call to the gateway.
  for (const char* flag :
       {"--put-file=/nonexistent/in", "--put_file=/nonexistent/in"}) {
    std::string out, err;
    EXPECT_EQ(RunCommand({FENCECTL_BIN, "--addr=127.0.0.1:1", "write",
                          "--token=1", "--resource=files/x", flag},
                         &out, &err),
              2)
        << flag;
    EXPECT_THAT(err, HasSubstr("cannot read \"/nonexistent/in\"")) << flag;
  }
  std::string out, err;
  // A flag given twice takes its last value (a wrapper's default
  // overridden), a global one too. (Lists keep every value: --param in
  // PostgresAdapterTest.FencectlRunsSqlWithParameters.)
  EXPECT_EQ(
      RunCommand({FENCECTL_BIN, "--addr=127.0.0.1:1", "write", "--token=1",
                  "--resource=files/x", "--put-file=/nonexistent/first",
                  "--put_file=/nonexistent/last"},
                 &out, &err),
      2);
  EXPECT_THAT(err, HasSubstr("cannot read \"/nonexistent/last\""));
  EXPECT_EQ(RunCommand({FENCECTL_BIN, "--addr=127.0.0.1:1", "--timeout=0",
                        "--timeout=1", "get", "--domain=d"},
                       &out, &err),
            5)
      << err;
  EXPECT_EQ(RunCommand({FENCECTL_BIN, "--addr=127.0.0.1:1", "--timeout=1",
                        "--timeout=0", "get", "--domain=d"},
                       &out, &err),
            2)
      << "the last --timeout, 0, is out of range";
  // The global flags go after the command too.
  EXPECT_EQ(RunCommand({FENCECTL_BIN, "get", "--domain=d", "--addr=127.0.0.1:1",
                        "--timeout=1"},
                       &out, &err),
            5)
      << err;
}

}  // namespace
}  // namespace fencegate
