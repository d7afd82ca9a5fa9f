// Copyright fencegate authors.

#include "gateway/log.h"

#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gateway/line_writer.h"

namespace fencegate {
namespace {

constexpr size_t kMaxQueuedBytes = 4 << 20;
// How long FlushLog() waits for stderr.
constexpr absl::Duration kFlushWait = absl::Seconds(2);

// Writes all of `data` to stderr; returns how many bytes it wrote (fewer
// if stderr fails).
size_t WriteAll(absl::string_view data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(STDERR_FILENO, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // Nowhere to report a failing stderr.
    done += static_cast<size_t>(n);
  }
  return done;
}

}  // namespace

std::string EscapeControl(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      absl::StrAppend(&out, "\\x", absl::Hex(u, absl::kZeroPad2));
    } else {
      out += c;
    }
  }
  return out;
}

namespace {

std::string Line(LogSeverity severity, absl::string_view message) {
  const char* level = severity == LogSeverity::kInfo      ? "I"
                      : severity == LogSeverity::kWarning ? "W"
                                                          : "E";
  return absl::StrCat(absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(),
                                       absl::UTCTimeZone()),
                      " ", level, " ", EscapeControl(message), "\n");
}

LineWriter* Logger() {
  static LineWriter* const writer = new LineWriter(LineWriterOptions{
      "log-writer", [](absl::string_view data) { return WriteAll(data); },
      [](uint64_t n) {
        return Line(
            LogSeverity::kWarning,
            absl::StrCat("log: ", n, " lines dropped: stderr fell more than ",
                         kMaxQueuedBytes >> 20, " MiB behind"));
      },
      kMaxQueuedBytes});
  return writer;
}

}  // namespace

void Log(LogSeverity severity, absl::string_view message) {
  Logger()->Append(Line(severity, message));
}

void FlushLog() { Logger()->Flush(kFlushWait); }

}  // namespace fencegate
