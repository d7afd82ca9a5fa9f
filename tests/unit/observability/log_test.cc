// Copyright fencegate authors.
//
// The gateway's line logger: whole lines from many threads, and a stuck
// stderr that drops (and reports) lines instead of blocking the caller.
// Each test points fd 2 at a file or pipe of its own and restores it.

#include "observability/log.h"

#include <fcntl.h>
#include <unistd.h>

#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

// Points stderr at `fd` until destroyed.
class StderrTo {
 public:
  explicit StderrTo(int fd) : saved_(::dup(STDERR_FILENO)) {
    ::dup2(fd, STDERR_FILENO);
  }
  ~StderrTo() {
    ::dup2(saved_, STDERR_FILENO);
    ::close(saved_);
  }

 private:
  const int saved_;
};

const std::regex& LinePattern() {
  static const std::regex re(
      R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z [IWE] .*)");
  return re;
}

TEST(LogTest, LinesFromManyThreadsAreWrittenWhole) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/stderr";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  constexpr int kThreads = 8, kLines = 500;
  {
    StderrTo redirect(fd);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([t] {
        for (int i = 0; i < kLines; ++i) {
          Log(LogSeverity::kInfo, absl::StrCat("t", t, " line ", i, " ",
                                               std::string(100 + i % 50, 'x')));
        }
      });
    }
    for (std::thread& t : threads) t.join();
    FlushLog();
  }
  ::close(fd);
  absl::StatusOr<std::string> text = testing::ReadFile(path);
  ASSERT_TRUE(text.ok()) << text.status();
  std::vector<int> next(kThreads, 0);
  int lines = 0;
  for (absl::string_view line :
       absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
    ++lines;
    ASSERT_TRUE(std::regex_match(std::string(line), LinePattern())) << line;
    std::vector<absl::string_view> words = absl::StrSplit(line, ' ');
    ASSERT_EQ(words.size(), 6u) << line;
    int t = 0, i = 0;
    ASSERT_TRUE(absl::SimpleAtoi(words[2].substr(1), &t)) << line;
    ASSERT_TRUE(absl::SimpleAtoi(words[4], &i)) << line;
    EXPECT_EQ(i, next[t]) << line;  // Each thread's lines, in its order.
    next[t] = i + 1;
    EXPECT_EQ(words[5].size(), 100u + i % 50) << line;
  }
  EXPECT_EQ(lines, kThreads * kLines);
}

// Text a client controls (an error raised by its SQL, a request id) ends up
// in log lines: a newline or carriage return in it must not start a line
// that looks like the gateway's own.
TEST(LogTest, ControlCharactersCannotForgeLines) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/stderr";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  {
    StderrTo redirect(fd);
    Log(LogSeverity::kError,
        "ops[0]: postgres error: boom\n2026-01-01T00:00:00.000Z I Write "
        "accepted\rfake\x1b[2J\x7f\tend");
    FlushLog();
  }
  ::close(fd);
  absl::StatusOr<std::string> text = testing::ReadFile(path);
  ASSERT_TRUE(text.ok()) << text.status();
  std::vector<absl::string_view> lines =
      absl::StrSplit(*text, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 1u) << *text;
  EXPECT_TRUE(absl::EndsWith(
      lines[0],
      "boom\\n2026-01-01T00:00:00.000Z I Write accepted\\rfake\\x1b[2J"
      "\\x7f\\tend"))
      << lines[0];
  EXPECT_EQ(text->find('\r'), std::string::npos);
  EXPECT_EQ(EscapeControl("plain \"quoted\" text"), "plain \"quoted\" text");
}

// stderr is a pipe nobody reads while 10 MiB of lines are logged: Log must
// return anyway (it would hang here if it waited for stderr), keeping at
// most 4 MiB queued and dropping the rest. Once the pipe is drained, every
// line is accounted for: written whole, or counted in the dropped report.
TEST(LogTest, AStuckStderrDropsLinesInsteadOfBlocking) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  constexpr int kLines = 10000;
  std::string out;
  {
    std::optional<StderrTo> redirect;
    redirect.emplace(pipe_fds[1]);
    for (int i = 0; i < kLines; ++i) {
      Log(LogSeverity::kInfo,
          absl::StrCat("payload ", i, " ", std::string(1000, 'y')));
    }
    std::thread reader([&] {
      char buf[65536];
      for (;;) {
        ssize_t n = ::read(pipe_fds[0], buf, sizeof(buf));
        if (n <= 0) return;
        out.append(buf, static_cast<size_t>(n));
      }
    });
    FlushLog();
    ::close(pipe_fds[1]);
    // Restoring stderr closes the pipe's last write end: the reader ends.
    redirect.reset();
    reader.join();
  }
  ::close(pipe_fds[0]);
  int written = 0;
  uint64_t dropped = 0;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    ASSERT_TRUE(std::regex_match(std::string(line), LinePattern())) << line;
    if (absl::StrContains(line, " I payload ")) {
      ++written;
      EXPECT_TRUE(absl::EndsWith(line, std::string(1000, 'y')));
      continue;
    }
    std::vector<absl::string_view> words = absl::StrSplit(line, ' ');
    ASSERT_GE(words.size(), 4u) << line;
    ASSERT_EQ(words[1], "W") << line;
    ASSERT_EQ(words[2], "log:") << line;
    uint64_t n = 0;
    ASSERT_TRUE(absl::SimpleAtoi(words[3], &n)) << line;
    EXPECT_THAT(std::string(line), ::testing::HasSubstr("lines dropped"));
    dropped += n;
  }
  EXPECT_GT(dropped, 0u);
  EXPECT_EQ(written + dropped, static_cast<uint64_t>(kLines));
  // Held back at most: the 4 MiB queue, a batch the writer took from it,
  // and what the pipe took (64 KiB); every line is over 1000 bytes.
  EXPECT_LE(written, (2 * (4 << 20) + (64 << 10)) / 1000);
}

}  // namespace
}  // namespace fencegate
