// Copyright fencegate authors.
//
// The SQL classifier (postgres/sql_classifier.h): every way
// a statement can reach a pooled session's state that a per-Write reset
// used to undo, and every way to hide transaction control, is refused or
// marked dirty by PostgreSQL's own parser; plain DML is safe; the verdict
// cache is bounded.

#include "postgres/sql_classifier.h"

#include <initializer_list>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "postgres/catalog_names.h"

namespace fencegate::postgres {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

struct Case {
  std::string sql;
  std::string reason;  // A part of the refusal's reason.
};

TEST(SqlClassifierTest, PlainDmlIsSafe) {
  // Some literals are written on two lines.
  // NOLINTBEGIN(bugprone-suspicious-missing-comma)
  for (const std::string sql : std::initializer_list<const char*>{
           "UPDATE jobs SET done = true WHERE id = $1",
           "insert into jobs (id) values ($1) on conflict (id) do nothing",
           "DELETE FROM jobs WHERE id = $1 RETURNING id",
           // One literal, written on two lines.
           "MERGE INTO jobs j USING (SELECT $1::int AS id) s ON j.id = "
           "s.id "
           "WHEN NOT MATCHED THEN INSERT (id) VALUES (s.id)",
           "SELECT id, done FROM jobs WHERE id = $1 FOR UPDATE",
           "WITH moved AS (DELETE FROM jobs WHERE id = $1 RETURNING *) "
           "INSERT INTO done_jobs SELECT * FROM moved",
           "  -- a comment\n  SELECT 1  ",
           "SELECT 1;",  // One statement and its terminator.
           // \r ends the comment, and COMMIT is then the column's alias
           // (SELECT 1 AS commit), as PostgreSQL's own lexer reads it.
           "select 1 --x\rCOMMIT",
           "SELECT pg_advisory_xact_lock(42)",  // Ends with its
                                                // transaction.
           "SELECT current_setting('statement_timeout')",
           "SELECT \"set_config_log\"(1)",  // Another function.
       }) {
    // NOLINTEND(bugprone-suspicious-missing-comma)
    const Verdict v = ClassifyStatement(sql);
    EXPECT_EQ(v.kind, StatementClass::kSafe) << sql << ": " << v.reason;
  }
  EXPECT_EQ(ClassifyStatement("update t set a = 1").statement, "UPDATE");
}

// Each vector the per-Write DISCARD ALL closed, and each the keyword check
// let through, refused with a reason naming what it is.
TEST(SqlClassifierTest, WhatCouldOutliveTheWriteIsRefused) {
  const std::vector<Case> cases = {
      // Transaction control, plain and hidden behind separators and
      // comments.
      {"COMMIT", "transaction control (COMMIT)"},
      {" ;\n commit", "transaction control (COMMIT)"},
      {";;end", "transaction control (COMMIT)"},
      {"/* a /* nested */ comment */ ROLLBACK", "transaction control"},
      {"SELECT 1; COMMIT; SELECT fencegate.fence('other', 99)", "3 statements"},
      {"SAVEPOINT a", "transaction control (SAVEPOINT)"},
      {"PREPARE TRANSACTION 'x'", "transaction control (PREPARE)"},
      {"start transaction isolation level serializable",
       "transaction control (START)"},
      // Settings.
      {"SET search_path = shadow, public", "SET is not allowed"},
      {"SET LOCAL statement_timeout = 0", "SET LOCAL is not allowed"},
      {"RESET ALL", "RESET is not allowed"},
      {"SET SESSION AUTHORIZATION DEFAULT", "is not allowed"},
      {"SET ROLE other_role", "SET is not allowed"},
      {"SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY",
       "is not allowed"},
      {"SELECT set_config('search_path', 'shadow', false)", "set_config"},
      {"SELECT pg_catalog.set_config('statement_timeout', '0', false)",
       "set_config"},
      {"SELECT U&\"\\0073et_config\"('work_mem', '1GB', false)", "set_config"},
      {"UPDATE pg_settings SET setting = '0' WHERE name = "
       "'statement_timeout'",
       "pg_settings"},
      {"SELECT * FROM pg_catalog.pg_settings", "pg_settings"},
      {"ALTER ROLE CURRENT_USER SET statement_timeout = 0",
       "ALTER ROLE ... SET"},
      {"SHOW search_path", "SHOW is not allowed"},
      // What a session keeps.
      {"SELECT pg_advisory_lock(42)", "pg_advisory_lock"},
      {"SELECT pg_try_advisory_lock_shared(1, 2)", "pg_try_advisory_lock"},
      {"SELECT pg_advisory_unlock_all()", "pg_advisory_unlock_all"},
      {"PREPARE p AS SELECT 1", "PREPARE is not allowed"},
      {"EXECUTE p", "EXECUTE is not allowed"},
      {"DEALLOCATE ALL", "DEALLOCATE is not allowed"},
      {"DECLARE c CURSOR WITH HOLD FOR SELECT 1", "DECLARE is not allowed"},
      {"LISTEN jobs", "LISTEN is not allowed"},
      {"CREATE TEMP TABLE jobs (id int)", "CREATE TABLE is not allowed"},
      {"SELECT * INTO TEMP jobs FROM other", "SELECT INTO"},
      {"SELECT 1 AS id INTO new_table", "SELECT INTO"},
      {"DISCARD ALL", "DISCARD is not allowed"},
      {"LOAD 'auto_explain'", "LOAD is not allowed"},
      {"SELECT currval('jobs_id_seq')", "currval"},
      {"SELECT lastval()", "lastval"},
      // Other callers and SQL run by functions.
      {"SELECT pg_cancel_backend(1234)", "pg_cancel_backend"},
      {"SELECT pg_terminate_backend(pid) FROM pg_stat_activity",
       "pg_terminate_backend"},
      {"SELECT query_to_xml('SET search_path = x', true, false, '')",
       "query_to_xml"},
      {"SELECT ts_stat('SELECT 1')", "ts_stat"},
      {"SELECT dblink_exec('dbname=x', 'DELETE FROM jobs')", "dblink_exec"},
      {"SELECT lo_import('/etc/passwd')", "lo_import"},
      // Functional notation: PostgreSQL reads x.f as f(x).
      {"SELECT (42::bigint).pg_advisory_lock", "pg_advisory_lock"},
      {"SELECT (pid).pg_terminate_backend FROM pg_stat_activity",
       "pg_terminate_backend"},
      {"SELECT a.pg_cancel_backend FROM pg_stat_activity a",
       "pg_cancel_backend"},
      {"SELECT ('SELECT 1'::text).ts_stat", "ts_stat"},
      {"SELECT setseed(0.5)", "setseed"},
      {"SELECT * FROM crosstab('SELECT 1, 2, 3') AS t(a int, b int)",
       "crosstab"},
      // Functions inside other clauses.
      {"UPDATE jobs SET note = (SELECT set_config('a.b', 'c', false))",
       "set_config"},
      {"INSERT INTO jobs SELECT 1 FROM pg_advisory_lock(7)",
       "pg_advisory_lock"},
      // Utility statements.
      {"COPY jobs TO STDOUT", "COPY is not allowed"},
      {"TRUNCATE jobs", "TRUNCATE is not allowed"},
      {"DROP TABLE jobs", "DROP is not allowed"},
      {"LOCK TABLE jobs", "LOCK is not allowed"},
      {"EXPLAIN ANALYZE DELETE FROM jobs", "EXPLAIN is not allowed"},
      {"VACUUM jobs", "VACUUM or ANALYZE is not allowed"},
      {"NOTIFY jobs", "NOTIFY is not allowed"},
      {"CREATE OR REPLACE FUNCTION fencegate.fence(text, bigint) RETURNS "
       "bigint LANGUAGE sql AS 'SELECT 1::bigint'",
       "CREATE FUNCTION is not allowed"},
      // Not one statement.
      {"", "no statement"},
      {"-- nothing to do", "no statement"},
      {";", "no statement"},
      {"SELEC 1", "does not parse"},
      {"SELECT 'unterminated", "does not parse"},
  };
  for (const Case& c : cases) {
    const Verdict v = ClassifyStatement(c.sql);
    EXPECT_EQ(v.kind, StatementClass::kRefused) << c.sql;
    EXPECT_THAT(v.reason, HasSubstr(c.reason)) << c.sql;
  }
}

TEST(SqlClassifierTest, DoAndCallAreDirty) {
  const Verdict d = ClassifyStatement(
      "DO $$BEGIN PERFORM set_config('a.b', 'c', false); "
      "END$$");
  EXPECT_EQ(d.kind, StatementClass::kDirty);
  EXPECT_EQ(d.statement, "DO");
  const Verdict c = ClassifyStatement("CALL complete_job($1)");
  EXPECT_EQ(c.kind, StatementClass::kDirty);
  EXPECT_EQ(c.statement, "CALL");
  // A DO block among other statements is still more than one statement.
  EXPECT_EQ(ClassifyStatement("DO $$BEGIN END$$; SELECT 1").kind,
            StatementClass::kRefused);
}

// What a statement calls by name, for CatalogNames: functions, the
// fields PostgreSQL may read as calls, operators, and whether a schema
// other than pg_catalog qualifies one.
TEST(SqlClassifierTest, CollectsWhatAStatementCallsByName) {
  Verdict v = ClassifyStatement(
      "SELECT lower(j.owner), helper(1) FROM jobs j WHERE j.id = ANY ($1) "
      "ORDER BY j.id USING <");
  EXPECT_EQ(v.kind, StatementClass::kSafe);
  EXPECT_THAT(v.callees.functions, UnorderedElementsAre("lower", "helper"));
  EXPECT_THAT(v.callees.fields, UnorderedElementsAre("owner", "id"));
  EXPECT_THAT(v.callees.operators, UnorderedElementsAre("=", "<"));
  EXPECT_FALSE(v.callees.qualified);
  EXPECT_FALSE(
      ClassifyStatement("SELECT pg_catalog.lower('A')").callees.qualified);
  EXPECT_TRUE(ClassifyStatement("SELECT app.lower('A')").callees.qualified);
  EXPECT_TRUE(
      ClassifyStatement("SELECT 1 OPERATOR(app.+) 2").callees.qualified);
  EXPECT_THAT(ClassifyStatement("CALL app_proc(1)").callees.functions,
              ElementsAre("app_proc"));
}

// A name counts as pg_catalog's only if no other schema defines it; with
// the names not read yet, any name counts as outside.
TEST(SqlClassifierTest, CallsOutsideCatalogFailsClosed) {
  CatalogNames names;
  names.catalog_only_functions = {"lower", "now"};
  names.other_functions = {"helper", "total"};
  names.other_operators = {"==="};
  auto outside = [&](const std::string& sql, const CatalogNames* n) {
    return CallsOutsideCatalog(ClassifyStatement(sql).callees, n);
  };
  EXPECT_FALSE(
      outside("UPDATE jobs SET owner = lower($1) WHERE id = 1", &names));
  EXPECT_TRUE(outside("SELECT helper(1)", &names));
  EXPECT_TRUE(outside("SELECT upper('a')", &names));  // Not pg_catalog's only.
  EXPECT_TRUE(outside("SELECT j.total FROM jobs j", &names));  // total(j).
  EXPECT_FALSE(outside("SELECT j.owner FROM jobs j", &names));
  EXPECT_TRUE(outside("SELECT 1 WHERE 'a' === 'b'", &names));
  EXPECT_TRUE(outside("SELECT app.lower('a')", &names));
  EXPECT_FALSE(outside("SELECT 1", nullptr));
  EXPECT_TRUE(outside("SELECT lower('a')", nullptr));
  // BETWEEN calls >= and <= without naming them; DISTINCT, ORDER BY, CASE x
  // WHEN and the like compare without a name: with operators defined
  // outside pg_catalog, they may resolve to one.
  CatalogNames ge = names;
  ge.other_operators = {">="};
  EXPECT_TRUE(outside("SELECT 1 WHERE 2 BETWEEN 1 AND 3", &ge));
  EXPECT_TRUE(outside("SELECT DISTINCT owner FROM jobs", &names));
  EXPECT_TRUE(outside("SELECT id FROM jobs ORDER BY owner", &names));
  EXPECT_TRUE(outside("SELECT CASE id WHEN 1 THEN 2 END FROM jobs", &names));
  EXPECT_TRUE(outside("SELECT greatest(1, 2)", &names));
  CatalogNames none = names;
  none.other_operators.clear();
  EXPECT_FALSE(
      outside("SELECT DISTINCT owner FROM jobs ORDER BY owner", &none));
  EXPECT_FALSE(outside("SELECT 1 WHERE 2 BETWEEN 1 AND 3", &none));
}

TEST(SqlClassifierTest, CountsTheParametersAStatementTakes) {
  EXPECT_EQ(ClassifyStatement("SELECT 1").params, 0);
  EXPECT_EQ(ClassifyStatement("UPDATE jobs SET a = $2 WHERE id = $1").params,
            2);
  EXPECT_EQ(ClassifyStatement("INSERT INTO t SELECT $3 FROM u WHERE v IN "
                              "(SELECT w FROM x WHERE y = $1)")
                .params,
            3);
  // Text that only looks like a parameter is not one.
  EXPECT_EQ(ClassifyStatement("SELECT '$1', \"$2\" FROM t").params, 0);
  EXPECT_EQ(ClassifyStatement("CALL p($1)").params, 1);
  EXPECT_EQ(ClassifyStatement("DO $$BEGIN PERFORM $1; END$$").params, 0);
}

TEST(SqlClassifierTest, DeepButLegalExpressionsParse) {
  std::string sql = "SELECT 1";
  for (int i = 0; i < 200; ++i) sql += " + 1";
  EXPECT_EQ(ClassifyStatement(sql).kind, StatementClass::kSafe);
}

TEST(SqlClassifierTest, CacheCountsHitsAndKeepsItsBounds) {
  SqlClassifier classifier(
      SqlClassifier::Options{/*max_entries=*/3, /*max_bytes=*/1000});
  bool hit = true;
  EXPECT_EQ(classifier.Classify("SELECT 1", &hit).kind, StatementClass::kSafe);
  EXPECT_FALSE(hit);
  EXPECT_EQ(classifier.Classify("SELECT 1", &hit).kind, StatementClass::kSafe);
  EXPECT_TRUE(hit);
  // A refusal is cached with its reason.
  EXPECT_EQ(classifier.Classify("SET a = 1").kind, StatementClass::kRefused);
  EXPECT_THAT(classifier.Classify("SET a = 1", &hit).reason,
              HasSubstr("SET is not allowed"));
  EXPECT_TRUE(hit);
  for (int i = 0; i < 10; ++i) {
    (void)classifier.Classify("SELECT " + std::to_string(i));
  }
  SqlClassifier::Counts counts = classifier.counts();
  EXPECT_EQ(counts.entries, 3u);
  EXPECT_EQ(counts.bytes, 3 * std::string("SELECT 9").size());
  EXPECT_EQ(counts.hits, 3u);  // SELECT 1, SET a = 1, SELECT 1 in the loop.
  // Least recently used out first: the newest is still there.
  (void)classifier.Classify("SELECT 9", &hit);
  EXPECT_TRUE(hit);
  (void)classifier.Classify("SELECT 1", &hit);
  EXPECT_FALSE(hit);

  // Bytes bound: texts over a quarter of it are never kept; others evict.
  SqlClassifier small(
      SqlClassifier::Options{/*max_entries=*/100, /*max_bytes=*/40});
  const std::string long_sql = "SELECT 1 /* " + std::string(20, 'x') + " */";
  (void)small.Classify(long_sql);
  EXPECT_EQ(small.counts().entries, 0u);
  for (int i = 0; i < 10; ++i)
    (void)small.Classify("SELECT " + std::to_string(i));
  EXPECT_LE(small.counts().bytes, 40u);
  EXPECT_EQ(small.counts().entries, 40u / std::string("SELECT 1").size());
}

// The port's question, from the same cache: each statement's text points
// into the string given, whichever string the answer was kept from.
TEST(SqlClassifierTest, SessionAnswersAsTheParserWithTextsInTheStringGiven) {
  SqlClassifier classifier(
      SqlClassifier::Options{/*max_entries=*/2, /*max_bytes=*/1000});
  for (int round = 0; round < 3; ++round) {
    for (const char* sql : {"BEGIN; UPDATE a SET x = ';' -- c\n; COMMIT",
                            "SET fencegate.token = 5", "SELECT 1"}) {
      // A copy of its own each time: the texts must point into it.
      const std::string copy = sql;
      absl::StatusOr<std::vector<SessionStatement>> got =
          classifier.ClassifySession(copy);
      absl::StatusOr<std::vector<SessionStatement>> want =
          ClassifySessionSql(copy);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_TRUE(want.ok()) << want.status();
      ASSERT_EQ(got->size(), want->size()) << sql;
      for (size_t i = 0; i < want->size(); ++i) {
        EXPECT_EQ((*got)[i].effect, (*want)[i].effect) << sql;
        EXPECT_EQ((*got)[i].text, (*want)[i].text) << sql;
        EXPECT_EQ((*got)[i].value, (*want)[i].value) << sql;
        EXPECT_GE((*got)[i].text.data(), copy.data()) << sql;
        EXPECT_LE((*got)[i].text.data() + (*got)[i].text.size(),
                  copy.data() + copy.size())
            << sql;
      }
      EXPECT_LE(classifier.counts().entries, 2u);
    }
  }
  // A string the parser refuses is refused from the cache too.
  for (int round = 0; round < 2; ++round) {
    EXPECT_EQ(classifier.ClassifySession("SELEC 1").status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

// One text that both doors send is kept once, with each door's answer: the
// second door's first lookup is a miss, its answer its own.
TEST(SqlClassifierTest, BothDoorsShareOneEntryPerText) {
  SqlClassifier classifier(SqlClassifier::Options{});
  const std::string sql = "UPDATE jobs SET owner = $1 WHERE id = $2";
  absl::StatusOr<std::vector<SessionStatement>> session =
      classifier.ClassifySession(sql);
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_EQ(session->size(), 1u);
  EXPECT_EQ((*session)[0].effect, SessionEffect::kStatement);
  bool hit = true;
  Verdict verdict = classifier.Classify(sql, &hit);
  EXPECT_FALSE(hit);
  EXPECT_EQ(verdict.kind, StatementClass::kSafe);
  EXPECT_EQ(verdict.params, 2);
  EXPECT_EQ(classifier.Classify(sql, &hit).params, 2);
  EXPECT_TRUE(hit);
  ASSERT_TRUE(classifier.ClassifySession(sql).ok());
  SqlClassifier::Counts counts = classifier.counts();
  EXPECT_EQ(counts.entries, 1u);
  EXPECT_EQ(counts.bytes, sql.size());
  EXPECT_EQ(counts.misses, 2u);
  EXPECT_EQ(counts.hits, 2u);
}

}  // namespace
}  // namespace fencegate::postgres
