// Copyright fencegate authors.
//
// Shared test helpers: status matchers, temporary directories, and a real
// fencegate process for end-to-end tests.

#ifndef TESTS_TEST_UTIL_H_
#define TESTS_TEST_UTIL_H_

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fixtures.h"

#define ASSERT_OK(expr)                         \
  do {                                          \
    const absl::Status fg_status_ = (expr);     \
    ASSERT_TRUE(fg_status_.ok()) << fg_status_; \
  } while (0)
#define EXPECT_OK(expr)                         \
  do {                                          \
    const absl::Status fg_status_ = (expr);     \
    EXPECT_TRUE(fg_status_.ok()) << fg_status_; \
  } while (0)
#define ASSERT_OK_AND_ASSIGN(lhs, expr)            \
  auto lhs##_or = (expr);                          \
  ASSERT_TRUE(lhs##_or.ok()) << lhs##_or.status(); \
  auto lhs = std::move(lhs##_or).value()  // NOLINT(bugprone-macro-parentheses)

// Skips a test that forces an interleaving with sync points when the build
// compiled them out (FENCEGATE_SYNC_POINTS=OFF): without its callbacks such a
// test would wait for an event that never comes.
#ifdef FENCEGATE_SYNC_POINTS
#define FENCEGATE_SKIP_WITHOUT_SYNC_POINTS() \
  do {                                       \
  } while (0)
#else
#define FENCEGATE_SKIP_WITHOUT_SYNC_POINTS() \
  GTEST_SKIP() << "needs a build with FENCEGATE_SYNC_POINTS=ON"
#endif

namespace fencegate::testing {

// True in a build with AddressSanitizer, whose quarantine keeps freed memory
// resident: bounds on a process's resident memory do not hold there.
#if defined(__SANITIZE_ADDRESS__)
#define FENCEGATE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FENCEGATE_ASAN 1
#endif
#endif
#ifdef FENCEGATE_ASAN
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif

// True in a build with ThreadSanitizer.
#if defined(__SANITIZE_THREAD__)
#define FENCEGATE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FENCEGATE_TSAN 1
#endif
#endif
#ifdef FENCEGATE_TSAN
inline constexpr bool kThreadSanitizer = true;
#else
inline constexpr bool kThreadSanitizer = false;
#endif

// True in a build with UndefinedBehaviorSanitizer. Its type (vptr) checks
// probe memory through a pipe the first time they meet a type, and report a
// false error when the process has no descriptor left for it.
#ifdef FENCEGATE_UNDEFINED_SANITIZER
inline constexpr bool kUndefinedSanitizer = true;
#else
inline constexpr bool kUndefinedSanitizer = false;
#endif

// Matches an absl::Status or absl::StatusOr<T> with the given code.
MATCHER_P(StatusIs, code,
          std::string("has status code ") +
              absl::StatusCodeToString(static_cast<absl::StatusCode>(code))) {
  absl::Status status;
  if constexpr (std::is_same_v<std::decay_t<arg_type>, absl::Status>) {
    status = arg;
  } else {
    status = arg.status();
  }
  *result_listener << "status is " << status;
  return status.code() == code;
}

// Expects `result` (an absl::Status or absl::StatusOr<T>) to have failed
// with `code`, its message holding `words`.
template <typename T>
void ExpectError(const T& result, absl::StatusCode code,
                 absl::string_view words) {
  absl::Status status;
  if constexpr (std::is_same_v<std::decay_t<T>, absl::Status>) {
    status = result;
  } else {
    status = result.status();
  }
  EXPECT_EQ(status.code(), code) << status;
  EXPECT_NE(status.message().find(words), absl::string_view::npos)
      << "\"" << status.message() << "\" does not say \"" << words << "\"";
}

// A fresh directory under $TMPDIR, removed (recursively) on destruction
// unless FENCEGATE_KEEP_TEST_DIRS is set (to read gateway logs afterwards).
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Points $TMPDIR at `dir` while in scope. A death test's child process
// runs the test again from its start, making its own TempDirs, and dies
// without removing them: in scope around EXPECT_DEATH, they are made
// inside `dir`, which the parent removes.
class ScopedTmpdir {
 public:
  explicit ScopedTmpdir(const std::string& dir);
  ~ScopedTmpdir();
  ScopedTmpdir(const ScopedTmpdir&) = delete;
  ScopedTmpdir& operator=(const ScopedTmpdir&) = delete;

 private:
  bool had_ = false;
  std::string saved_;
};

}  // namespace fencegate::testing

#endif  // TESTS_TEST_UTIL_H_
