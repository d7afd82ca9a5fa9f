// Copyright fencegate authors.
//
// A session without a token on the PostgreSQL port (docs/pgwire.md, "A
// session without a token"): it runs as the route's read role, so that
// PostgreSQL itself refuses its writes, whatever the port reads in its
// statements; a route without a read role refuses such sessions; a read
// role that could write is not served; fencectl pg-setup --read_role makes
// a role one.

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "postgres/read_role.h"
#include "tests/fixtures.h"
#include "tests/pg_port_fixture.h"

namespace fencegate {
namespace {

using ::testing::HasSubstr;

TEST_F(PgPortTest, ASessionWithoutATokenRunsAsTheReadRole) {
  auto g = StartGateway();
  ASSERT_NE(g, nullptr);
  std::string out, err;
  ASSERT_EQ(Psql(*g, "",
                 {"SELECT owner FROM jobs WHERE id = 1", "SELECT current_user"},
                 &out, &err),
            0)
      << err;
  EXPECT_EQ(out, absl::StrCat("nobody\n", kReadRole, "\n"));
  // The port refuses what it sees would lift read-only.
  for (const char* lift :
       {"SET default_transaction_read_only = off", "BEGIN READ WRITE",
        "SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE", "RESET ALL",
        "SELECT set_config('default_transaction_read_only', 'off', false)"}) {
    EXPECT_NE(Psql(*g, "", {lift}, &out, &err), 0) << lift;
    EXPECT_THAT(err, HasSubstr("connect with fencegate.token to write"))
        << lift;
  }
  // A token cannot be taken in the session: it would need the route's role.
  EXPECT_NE(
      Psql(*g, "",
           {"SET fencegate.domain = 'jobs-lock'", "SET fencegate.token = 3",
            "UPDATE jobs SET owner = 'three' WHERE id = 1"},
           &out, &err),
      0);
  EXPECT_THAT(err, HasSubstr("cannot take one"));
  // What the port cannot see, PostgreSQL refuses: a function lifts
  // read-only for the session, and the write is denied to the role.
  Exec(
      "CREATE OR REPLACE FUNCTION public.app_lift() RETURNS void "
      "LANGUAGE plpgsql AS $$BEGIN EXECUTE 'SET SESSION CHARACTERISTICS AS "
      "TRANSACTION READ WRITE'; END$$");
  EXPECT_NE(Psql(*g, "",
                 {"SELECT public.app_lift()", "SHOW transaction_read_only",
                  "UPDATE jobs SET owner = 'lifted' WHERE id = 1"},
                 &out, &err),
            0);
  EXPECT_EQ(out, "\noff\n");  // lifted, as far as the port is concerned
  EXPECT_THAT(err, HasSubstr("permission denied for table jobs"));
  Exec("DROP FUNCTION public.app_lift()");
  EXPECT_EQ(Owner(), "nobody");
  // With a token in the startup options the session writes.
  ASSERT_EQ(Psql(*g, Options(3),
                 {"UPDATE jobs SET owner = 'three' WHERE id = 1",
                  "SELECT current_user"},
                 &out, &err),
            0)
      << err;
  EXPECT_EQ(out, "fencegate_worker\n");
  EXPECT_EQ(Owner(), "three");
}

TEST_F(PgPortTest, ARouteWithoutAReadRoleServesOnlySessionsWithAToken) {
  auto g = StartGateway({}, "read_user=");
  ASSERT_NE(g, nullptr);
  std::string out, err;
  EXPECT_NE(Psql(*g, "", {"SELECT 1"}, &out, &err), 0);
  EXPECT_THAT(err, HasSubstr("serves no session without a token"));
  ASSERT_EQ(Psql(*g, Options(2), {"UPDATE jobs SET owner = 'two' WHERE id = 1"},
                 &out, &err),
            0)
      << err;
  EXPECT_EQ(Owner(), "two");
}

TEST_F(PgPortTest, AReadRoleThatCouldWriteIsNotServed) {
  CreateRole("fencegate_loose_reader", "LOGIN");
  ASSERT_OK(postgres::SetUpReadRole(server_->Conninfo(), "fencegate",
                                    "fencegate_loose_reader",
                                    "fencegate_worker"));
  Exec("GRANT UPDATE ON jobs TO fencegate_loose_reader");
  auto g = StartGateway({}, "read_user=fencegate_loose_reader");
  ASSERT_NE(g, nullptr);
  std::string out, err;
  EXPECT_NE(Psql(*g, "", {"SELECT 1"}, &out, &err), 0);
  EXPECT_THAT(err, HasSubstr("is not read-only: it may write jobs"));
  // Advisory locks would let it take what the route's sessions need.
  Exec("REVOKE UPDATE ON jobs FROM fencegate_loose_reader");
  Exec(
      "GRANT EXECUTE ON FUNCTION pg_catalog.pg_advisory_lock(bigint) TO "
      "fencegate_loose_reader");
  EXPECT_NE(Psql(*g, "", {"SELECT 1"}, &out, &err), 0);
  EXPECT_THAT(err, HasSubstr("it may execute pg_advisory_lock(bigint)"));
  Exec(
      "REVOKE EXECUTE ON FUNCTION pg_catalog.pg_advisory_lock(bigint) FROM "
      "fencegate_loose_reader");
  ASSERT_EQ(Psql(*g, "", {"SELECT owner FROM jobs WHERE id = 1"}, &out, &err),
            0)
      << err;
  EXPECT_EQ(out, "nobody\n");
}

TEST_F(PgPortTest, TheRoutesOwnRoleIsNoReadRole) {
  testing::TempDir dir;
  std::string out, err;
  EXPECT_NE(
      testing::RunCommand(
          {"/usr/bin/timeout", "30", FENCEGATE_BIN, "--listen=127.0.0.1:0",
           "--data_dir=" + dir.path(),
           "--route=db=" + server_->Uri("read_user=fencegate_worker"),
           absl::StrCat("--pg_listen=127.0.0.1:", testing::FreeLoopbackPort())},
          &out, &err),
      0);
  EXPECT_THAT(err, HasSubstr("read_user \"fencegate_worker\" is the route's "
                             "own role"));
}

TEST_F(PgPortTest, PgSetupMakesAReadRole) {
  CreateRole("fencegate_new_reader", "LOGIN");
  Exec(
      "DO $$BEGIN EXECUTE format('GRANT TEMPORARY ON DATABASE %I TO "
      "fencegate_new_reader', current_database()); END$$");
  std::string out, err;
  ASSERT_EQ(testing::RunCommand(
                {FENCECTL_BIN, "pg-setup", "--admin_dsn=" + server_->Conninfo(),
                 "--role=fencegate_worker", "--read_role=fencegate_new_reader"},
                &out, &err),
            0)
      << err;
  EXPECT_THAT(out, HasSubstr("read role fencegate_new_reader"));
  auto can = [](const std::string& check) {
    return Exec("SELECT " + check)[0][0].as<bool>();
  };
  EXPECT_TRUE(
      can("has_table_privilege('fencegate_new_reader', 'jobs', "
          "'SELECT')"));
  EXPECT_FALSE(
      can("has_table_privilege('fencegate_new_reader', 'jobs', "
          "'UPDATE')"));
  EXPECT_FALSE(
      can("has_database_privilege('fencegate_new_reader', "
          "current_database(), 'TEMPORARY')"));
  // A member of the route's role could become it: refused, saying so.
  Exec("GRANT fencegate_worker TO fencegate_new_reader");
  EXPECT_NE(testing::RunCommand(
                {FENCECTL_BIN, "pg-setup", "--admin_dsn=" + server_->Conninfo(),
                 "--role=fencegate_worker", "--read_role=fencegate_new_reader"},
                &out, &err),
            0);
  EXPECT_THAT(err, HasSubstr("REVOKE fencegate_worker FROM "
                             "fencegate_new_reader"));
  Exec("REVOKE fencegate_worker FROM fencegate_new_reader");
  // The route's own role is refused too.
  EXPECT_THAT(postgres::SetUpReadRole(server_->Conninfo(), "fencegate",
                                      "fencegate_worker", "fencegate_worker")
                  .message(),
              HasSubstr("is the route's role"));
}

}  // namespace
}  // namespace fencegate
