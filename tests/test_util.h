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

#define ASSERT_OK(expr)                                  \
  do {                                                   \
    const absl::Status fg_status_ = (expr);              \
    ASSERT_TRUE(fg_status_.ok()) << fg_status_;          \
  } while (0)
#define EXPECT_OK(expr)                                  \
  do {                                                   \
    const absl::Status fg_status_ = (expr);              \
    EXPECT_TRUE(fg_status_.ok()) << fg_status_;          \
  } while (0)
#define ASSERT_OK_AND_ASSIGN(lhs, expr)                        \
  auto lhs##_or = (expr);                                      \
  ASSERT_TRUE(lhs##_or.ok()) << lhs##_or.status();             \
  auto lhs = std::move(lhs##_or).value()

namespace fencegate::testing {

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

// Reads a whole file; nullopt-like empty StatusOr if missing.
absl::StatusOr<std::string> ReadFile(const std::string& path);
void WriteFileOrDie(const std::string& path, const std::string& data);

// Polls `condition` until true or `timeout` passes. For waiting on another
// process (a port file, a log line), never for ordering threads.
bool WaitFor(const std::function<bool()>& condition,
             absl::Duration timeout = absl::Seconds(30));

// A fencegate server process started from the build tree, on a free port.
class GatewayProcess {
 public:
  // Starts fencegate --data_dir=data_dir --listen=127.0.0.1:0 plus `args`,
  // and waits until it serves.
  static absl::StatusOr<std::unique_ptr<GatewayProcess>> Start(
      const std::string& data_dir, const std::vector<std::string>& args = {});
  ~GatewayProcess();  // SIGKILLs the process if still running.

  int port() const { return port_; }
  std::string address() const;
  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }

  // Sends `sig`, then waits for exit; returns the wait status.
  int Stop(int sig);

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::string log_path_;
};

// Runs a command (argv[0] is a path), capturing stdout; returns the exit
// code, or -1 if it did not exit normally.
int RunCommand(const std::vector<std::string>& argv, std::string* out,
               std::string* err = nullptr);

}  // namespace fencegate::testing

#endif  // TESTS_TEST_UTIL_H_
