// Copyright fencegate authors.

#include "gateway/log.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <exception>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace fencegate {
namespace {

constexpr size_t kMaxQueuedBytes = 4 << 20;
// The writer waits this long after a first line, or until this much is
// queued, before writing.
constexpr absl::Duration kGatherTime = absl::Milliseconds(2);
constexpr size_t kGatherBytes = 64 << 10;
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

// The queue and its writer thread; never destroyed, so that threads still
// logging while the process exits find it alive.
class Logger {
 public:
  static Logger* Get() {
    static Logger* const logger = new Logger;
    return logger;
  }

  void Append(std::string line) {
    absl::MutexLock lock(&mu_);
    if (!StartedLocked()) {
      // No writer thread: write here, as a last resort.
      WriteAll(line);
      return;
    }
    if (queued_.size() + line.size() > kMaxQueuedBytes) {
      ++dropped_;
      return;
    }
    queued_ += line;
    appended_ += line.size();
  }

  void Flush() {
    absl::MutexLock lock(&mu_);
    if (!started_) return;
    const uint64_t target = appended_;
    ++flushes_waiting_;
    auto done = [this, target]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return written_ >= target;
    };
    // A stderr that accepts nothing must not hold up the process's exit.
    mu_.AwaitWithTimeout(absl::Condition(&done), kFlushWait);
    --flushes_waiting_;
  }

 private:
  Logger() = default;

  // Starts the writer on first use; false if it cannot be started.
  bool StartedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (started_ || start_failed_) return started_;
    try {
      std::thread([this] { Run(); }).detach();
      started_ = true;
    } catch (const std::exception&) {
      start_failed_ = true;
    }
    return started_;
  }

  void Run() {
    pthread_setname_np(pthread_self(), "log-writer");
    // Signals are for the threads that handle them (the gateway's main
    // thread waits for SIGTERM), whatever thread happened to log first.
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    std::string batch;
    for (;;) {
      uint64_t dropped = 0;
      size_t lines_bytes = 0;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return !queued_.empty() || dropped_ > 0;
        };
        mu_.Await(absl::Condition(&ready));
        // Gather lines for a moment, unless there are many or someone
        // waits for them: the writer then wakes once per burst, not once
        // per line.
        auto full = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return queued_.size() >= kGatherBytes || flushes_waiting_ > 0;
        };
        mu_.AwaitWithTimeout(absl::Condition(&full), kGatherTime);
        batch.swap(queued_);
        lines_bytes = batch.size();
        dropped = dropped_;
        dropped_ = 0;
      }
      if (dropped > 0) {
        batch += Line(LogSeverity::kWarning,
                      absl::StrCat("log: ", dropped,
                                   " lines dropped: stderr fell more than ",
                                   kMaxQueuedBytes >> 20, " MiB behind"));
      }
      const size_t done = WriteAll(batch);
      // Lines stderr refused are lost: count them with the dropped ones,
      // for the next report.
      const uint64_t lost = done >= lines_bytes
                                ? 0
                                : std::count(batch.begin() + done,
                                             batch.begin() + lines_bytes, '\n');
      batch.clear();
      absl::MutexLock lock(&mu_);
      written_ += lines_bytes;  // Written, or given up on.
      dropped_ += lost;
    }
  }

  absl::Mutex mu_;
  std::string queued_ ABSL_GUARDED_BY(mu_);
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  // Bytes of lines queued, and of those written, since the start.
  uint64_t appended_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t written_ ABSL_GUARDED_BY(mu_) = 0;
  int flushes_waiting_ ABSL_GUARDED_BY(mu_) = 0;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool start_failed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

void Log(LogSeverity severity, absl::string_view message) {
  Logger::Get()->Append(Line(severity, message));
}

void FlushLog() { Logger::Get()->Flush(); }

}  // namespace fencegate
