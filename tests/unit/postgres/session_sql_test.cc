// Copyright fencegate authors.
//
// What a client's query string does to its session
// (postgres/include/postgres/session_sql.h): statement boundaries from
// PostgreSQL's parser, where transactions begin and end, the gateway's own
// settings, and the statements that would let a session without a token
// write.

#include "postgres/session_sql.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace fencegate::postgres {
namespace {

using ::fencegate::testing::StatusIs;
using ::testing::HasSubstr;

std::vector<SessionStatement> Statements(absl::string_view sql) {
  absl::StatusOr<std::vector<SessionStatement>> s = ClassifySessionSql(sql);
  EXPECT_TRUE(s.ok()) << sql << ": " << s.status();
  return s.ok() ? *s : std::vector<SessionStatement>{};
}

// The one statement of `sql`.
SessionStatement One(absl::string_view sql) {
  std::vector<SessionStatement> s = Statements(sql);
  EXPECT_EQ(s.size(), 1u) << sql;
  return s.empty() ? SessionStatement{} : s[0];
}

TEST(SessionSqlTest, StatementsAreSplitWhereTheParserSplitsThem) {
  std::vector<SessionStatement> s =
      Statements("BEGIN; UPDATE t SET a = 1;\nCOMMIT");
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].effect, SessionEffect::kBegin);
  EXPECT_EQ(s[1].effect, SessionEffect::kStatement);
  EXPECT_THAT(std::string(s[1].text), HasSubstr("UPDATE t SET a = 1"));
  EXPECT_EQ(s[2].effect, SessionEffect::kCommit);
  EXPECT_THAT(std::string(s[2].text), HasSubstr("COMMIT"));
  // A ';' in a string, a quoted name, a comment or a dollar-quoted body
  // splits nothing, and a COMMIT there is no COMMIT.
  for (const char* sql : {"UPDATE t SET \"a ;\n commit\" = 1",
                          "SELECT ';\n commit'", "SELECT 1 -- ; commit",
                          "SELECT $x$;commit$x$", "SELECT 1 /* ; commit */"}) {
    EXPECT_EQ(One(sql).effect, SessionEffect::kStatement) << sql;
  }
  EXPECT_TRUE(Statements("").empty());
  EXPECT_TRUE(Statements("-- nothing").empty());
  EXPECT_THAT(ClassifySessionSql("UPDATE t SET"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ClassifySessionSql("BEGIN; SELEC 1").status().message(),
              HasSubstr("does not parse"));
}

TEST(SessionSqlTest, TransactionControlIsKnownInEachSpelling) {
  EXPECT_EQ(One("START TRANSACTION").effect, SessionEffect::kBegin);
  EXPECT_EQ(One("begin work").effect, SessionEffect::kBegin);
  EXPECT_EQ(One("END").effect, SessionEffect::kCommit);
  EXPECT_EQ(One("ABORT").effect, SessionEffect::kRollback);
  SessionStatement chain = One("COMMIT AND CHAIN");
  EXPECT_EQ(chain.effect, SessionEffect::kCommit);
  EXPECT_TRUE(chain.chain);
  EXPECT_TRUE(One("ROLLBACK AND CHAIN").chain);
  EXPECT_FALSE(One("COMMIT").chain);
  // Savepoints live inside a transaction.
  EXPECT_EQ(One("ROLLBACK TO SAVEPOINT s").effect, SessionEffect::kStatement);
  EXPECT_EQ(One("SAVEPOINT s").effect, SessionEffect::kStatement);
  for (const char* sql : {"PREPARE TRANSACTION 'x'", "COMMIT PREPARED 'x'",
                          "ROLLBACK PREPARED 'x'"}) {
    SessionStatement s = One(sql);
    EXPECT_EQ(s.effect, SessionEffect::kRefused) << sql;
    EXPECT_THAT(s.reason, HasSubstr("two-phase commit")) << sql;
  }
}

TEST(SessionSqlTest, TheGatewaysSettingsAreReadFromSetAndShow) {
  SessionStatement token = One("SET fencegate.token = 7");
  EXPECT_EQ(token.effect, SessionEffect::kGatewaySet);
  EXPECT_EQ(token.setting, "token");
  EXPECT_EQ(token.value, "7");
  // Past int32, the parser reads a number as a float's text.
  EXPECT_EQ(One("SET fencegate.token TO 18446744073709551615").value,
            "18446744073709551615");
  SessionStatement domain = One("SET SESSION fencegate.domain = 'billing/run'");
  EXPECT_EQ(domain.effect, SessionEffect::kGatewaySet);
  EXPECT_EQ(domain.setting, "domain");
  EXPECT_EQ(domain.value, "billing/run");
  EXPECT_EQ(One("SET \"FenceGate\".domain = jobs").value, "jobs");
  SessionStatement show = One("SHOW fencegate.token");
  EXPECT_EQ(show.effect, SessionEffect::kGatewayShow);
  EXPECT_EQ(show.setting, "token");
  EXPECT_EQ(One("SHOW search_path").effect, SessionEffect::kStatement);
  for (const char* sql :
       {"SET LOCAL fencegate.token = 1", "RESET fencegate.token",
        "SET fencegate.token TO DEFAULT", "SET fencegate.holder = 1",
        "SET fencegate.domain = a, b", "SHOW fencegate.holder",
        // They would release the fence the server connection holds.
        "DISCARD ALL", "SELECT pg_advisory_unlock_all()",
        "SELECT 1 FROM pg_catalog.pg_advisory_unlock_shared(1717923427, 5)",
        "SELECT pg_try_advisory_xact_lock(1)"}) {
    SessionStatement s = One(sql);
    EXPECT_EQ(s.effect, SessionEffect::kRefused) << sql;
    EXPECT_FALSE(s.reason.empty()) << sql;
  }
}

TEST(SessionSqlTest, WhatWouldLetATokenlessSessionWriteIsMarked) {
  for (const char* sql :
       {"SET default_transaction_read_only = off",
        "SET SESSION transaction_read_only TO false",
        "RESET default_transaction_read_only", "RESET ALL",
        "SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE",
        "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE, READ WRITE",
        "BEGIN READ WRITE",
        "START TRANSACTION ISOLATION LEVEL REPEATABLE READ READ WRITE",
        "SELECT pg_catalog.set_config('default_transaction_read_only', 'f', 0)",
        "SELECT 1 FROM t WHERE a = (SELECT set_config('x.y', '1', false))",
        "DO $$BEGIN PERFORM 1; END$$", "CALL p()"}) {
    EXPECT_TRUE(One(sql).lifts_read_only) << sql;
  }
  for (const char* sql :
       {"SELECT 1", "UPDATE t SET a = 1", "BEGIN", "BEGIN READ ONLY",
        "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", "SET search_path = a",
        "DISCARD PLANS", "SHOW transaction_read_only",
        "SELECT current_setting('default_transaction_read_only')"}) {
    EXPECT_FALSE(One(sql).lifts_read_only) << sql;
  }
  EXPECT_TRUE(One("BEGIN READ WRITE").read_write);
  EXPECT_FALSE(One("BEGIN READ ONLY").read_write);
  // The same names decide a startup packet's settings (the port's one list).
  EXPECT_TRUE(IsReadOnlySetting("Default_Transaction_Read_Only"));
  EXPECT_TRUE(IsReadOnlySetting("transaction_read_only"));
  EXPECT_FALSE(IsReadOnlySetting("transaction_isolation"));
  EXPECT_FALSE(IsReadOnlySetting("read_only"));
}

TEST(SessionSqlTest, TheGatewaysStatementNamesAreRefused) {
  for (const char* sql :
       {"DEALLOCATE fencegate_fence", "PREPARE Fencegate_Fence AS SELECT 1"}) {
    SessionStatement s = One(sql);
    EXPECT_EQ(s.effect, SessionEffect::kRefused) << sql;
    EXPECT_THAT(s.reason, HasSubstr("reserved")) << sql;
  }
  EXPECT_EQ(One("PREPARE mine AS SELECT 1").effect, SessionEffect::kStatement);
}

TEST(SessionSqlTest, PinnedSettingsKeepTheirValues) {
  for (const char* sql :
       {"SET standard_conforming_strings = off",
        "SET SESSION standard_conforming_strings TO 0",
        "SET LOCAL standard_conforming_strings = false",
        "SET client_encoding = 'LATIN1'", "SET client_encoding TO SJIS",
        "SET NAMES 'GBK'", "SET standard_conforming_strings FROM CURRENT",
        "SELECT set_config('standard_conforming_strings', 'off', false)",
        "SELECT 1 FROM t WHERE set_config('CLIENT_ENCODING', 'x', true) > ''",
        "SELECT set_config($1, 'off', false)",
        "PREPARE p AS SELECT set_config(lower('x'), 'off', false)"}) {
    const SessionStatement s = One(sql);
    EXPECT_EQ(s.effect, SessionEffect::kRefused) << sql;
    EXPECT_FALSE(s.reason.empty()) << sql;
  }
  for (const char* sql :
       {"SET standard_conforming_strings = on",
        "SET standard_conforming_strings TO true",
        "RESET standard_conforming_strings",
        "SET standard_conforming_strings TO DEFAULT",
        "SET client_encoding = 'UTF8'", "SET client_encoding = 'utf-8'",
        "SET NAMES 'unicode'", "SET NAMES", "RESET client_encoding"}) {
    EXPECT_NE(One(sql).effect, SessionEffect::kRefused) << sql;
  }
  EXPECT_TRUE(KeepsPin("client_encoding", "UTF_8"));
  EXPECT_FALSE(KeepsPin("client_encoding", "SQL_ASCII"));
  EXPECT_FALSE(KeepsPin("standard_conforming_strings", "of"));
  EXPECT_TRUE(KeepsPin("datestyle", "anything"));
}

TEST(SessionSqlTest, CallsAnywhereInAStatementAreSeen) {
  for (const char* fn : {"pg_terminate_backend", "pg_cancel_backend"}) {
    for (const std::string& sql :
         {absl::StrCat("SELECT ", fn, "(1)"),
          absl::StrCat("PREPARE p AS SELECT pg_catalog.", fn, "($1)"),
          absl::StrCat("EXPLAIN ANALYZE SELECT ", fn, "(1)"),
          absl::StrCat("UPDATE t SET a = (SELECT ", fn, "(2))")}) {
      const SessionStatement s = One(sql);
      EXPECT_EQ(s.effect, SessionEffect::kRefused) << sql;
      EXPECT_THAT(s.reason, HasSubstr("other sessions' backends")) << sql;
    }
  }
  const std::string prepare =
      absl::StrCat("PREPARE p AS SELECT set_config(",
                   "'default_transaction_read_only', 'off', false)");
  EXPECT_TRUE(One(prepare).lifts_read_only);
  for (const char* sql :
       {"SELECT query_to_xml('SELECT 1', true, true, '')",
        "SELECT * FROM ts_stat('SELECT v FROM t')",
        "SELECT cursor_to_xml('c', 1, true, true, '')",
        "SELECT lo_from_bytea(0, 'x')", "SELECT lo_unlink(1)",
        "SELECT lowrite(0, 'x')", "SELECT * FROM dblink('x', 'y') AS t(a int)",
        "LOCK TABLE t IN ACCESS EXCLUSIVE MODE", "LOCK t",
        "LOCK TABLE t IN ROW EXCLUSIVE MODE"}) {
    EXPECT_TRUE(One(sql).lifts_read_only) << sql;
  }
  for (const char* sql : {"LOCK TABLE t IN ACCESS SHARE MODE",
                          "SELECT lower('x')", "SELECT loads FROM t"}) {
    EXPECT_FALSE(One(sql).lifts_read_only) << sql;
  }
}

}  // namespace
}  // namespace fencegate::postgres
