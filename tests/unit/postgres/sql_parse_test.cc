// Copyright fencegate authors.
//
// The parser's stack (postgres/include/postgres/sql_parse.h): text that
// nests deeper than a thread's stack could hold is refused, not a crash,
// on any thread; long text is parsed on the long-text parser's own thread;
// text past the bound is refused unparsed.

#include "postgres/sql_parse.h"

#include <pthread.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace fencegate::postgres {
namespace {

using ::testing::HasSubstr;

// `terms` terms of 1+1+...: a parse tree `terms` levels deep.
std::string DeepSum(int terms) {
  std::string sql = "SELECT 1";
  for (int i = 1; i < terms; ++i) sql += "+1";
  return sql;
}

// Runs `fn` on a thread with a stack of `stack_bytes`, and waits for it.
void OnSmallStack(size_t stack_bytes, void (*fn)(void*), void* arg) {
  struct Call {
    void (*fn)(void*);
    void* arg;
  } call{fn, arg};
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, stack_bytes), 0);
  pthread_t thread;
  ASSERT_EQ(pthread_create(
                &thread, &attr,
                [](void* c) -> void* {
                  auto* call = static_cast<Call*>(c);
                  call->fn(call->arg);
                  return nullptr;
                },
                &call),
            0);
  pthread_attr_destroy(&attr);
  ASSERT_EQ(pthread_join(thread, nullptr), 0);
}

bool ThreadNamed(const std::string& name) {
  for (const auto& task :
       std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string line;
    if (std::getline(comm, line) && line == name) return true;
  }
  return false;
}

// 30 000 levels take libpg_query about 10 MB of stack: more than the main
// thread's 8 MB (this crashed before the parse moved to a stack that holds
// it).
TEST(SqlParseTest, ADeepExpressionIsRefusedOnTheMainThread) {
  absl::StatusOr<pg_query::ParseResult> parsed = ParseSql(DeepSum(30000));
  EXPECT_THAT(parsed.status(),
              testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(parsed.status().message(),
              HasSubstr("nests deeper than 1000 levels"));
}

// On a thread with a 4 MiB stack, 12 000 levels (4.3 MB of stack in
// libpg_query, more than the thread has) are parsed elsewhere; 300 (600
// levels of protobuf, which the caller destroys) are accepted, as
// anywhere.
TEST(SqlParseTest, ASmallStackIsNeverOverflowed) {
  struct Result {
    absl::Status deep;
    absl::Status shallow;
  } result;
  OnSmallStack(
      4 << 20,
      [](void* r) {
        auto* result = static_cast<Result*>(r);
        result->deep = ParseSql(DeepSum(12000)).status();
        result->shallow = ParseSql(DeepSum(300)).status();
      },
      &result);
  EXPECT_THAT(result.deep,
              testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(result.deep.message()),
              HasSubstr("nests deeper than 1000 levels"));
  EXPECT_TRUE(result.shallow.ok()) << result.shallow;
}

// A tree about 900 levels deep, dropped on a 256 KiB stack once Flatten()
// has emptied it: its destructor, left to itself, recurses as deep.
TEST(SqlParseTest, AFlattenedTreeIsDroppedWithoutRecursion) {
  struct Result {
    absl::Status parsed;
    int statements = -1;
  } result;
  OnSmallStack(
      256 << 10,
      [](void* r) {
        auto* result = static_cast<Result*>(r);
        absl::StatusOr<pg_query::ParseResult> tree = ParseSql(DeepSum(450));
        result->parsed = tree.status();
        if (!tree.ok()) return;
        Flatten(*tree);
        result->statements = tree->stmts_size();
      },
      &result);
  EXPECT_TRUE(result.parsed.ok()) << result.parsed;
  EXPECT_EQ(result.statements, 0);
}

TEST(SqlParseTest, LongShallowTextIsParsedOnTheLongTextParsersThread) {
  std::string sql = "SELECT 1";
  while (sql.size() < (512 << 10)) sql += ",1";
  absl::StatusOr<pg_query::ParseResult> parsed = ParseSql(sql);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->stmts_size(), 1);
  EXPECT_EQ(parsed->stmts(0).stmt().select_stmt().target_list_size(),
            static_cast<int>(sql.size() / 2 - 3));
  EXPECT_TRUE(ThreadNamed("fg-sql-parse"));
}

TEST(SqlParseTest, TextPastTheBoundIsRefusedUnparsed) {
  std::string sql = "SELECT 1";
  sql.resize(kMaxSqlBytes + 1, ' ');
  absl::StatusOr<pg_query::ParseResult> parsed = ParseSql(sql);
  EXPECT_THAT(parsed.status(),
              testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(parsed.status().message()),
              HasSubstr("at most 1048576 are parsed"));
  sql.resize(kMaxSqlBytes);
  EXPECT_TRUE(ParseSql(sql).ok());
}

TEST(SqlParseTest, StackLeftIsWithinTheThreadsStack) {
  const size_t left = StackLeft();
  EXPECT_GT(left, size_t{64} << 10);
  EXPECT_LT(left, size_t{1} << 30);
}

}  // namespace
}  // namespace fencegate::postgres
