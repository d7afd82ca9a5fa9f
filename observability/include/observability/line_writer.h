// Copyright fencegate authors.
//
// LineWriter: queues whole lines and writes them from one thread of its own,
// so that no request thread ever waits for the file or pipe behind it. The
// operational log (log.h) writes stderr through one; the audit log
// (audit_log.h) its file.
//
// The writer gathers lines for up to 2 ms (or 64 KiB) before writing, so a
// burst of lines costs one wake-up and one system call. If the sink falls
// more than `max_queued_bytes` behind (a stuck pipe, a full disk), new lines
// are dropped and counted instead of stalling their callers, as are lines
// the sink refuses; once it catches up, the writer writes `dropped_line(n)`
// to say how many were lost. Lines from different threads never interleave
// within a line. Should the writer thread fail to start, each caller writes
// its own line (and then does wait for the sink).

#ifndef OBSERVABILITY_LINE_WRITER_H_
#define OBSERVABILITY_LINE_WRITER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace fencegate {

struct LineWriterOptions {
  // Name of the writer thread (at most 15 bytes).
  std::string thread_name = "line-writer";
  // Writes `data` (whole lines), returning how many bytes it wrote. Called
  // on the writer thread only (or by Append() if the thread did not start).
  std::function<size_t(absl::string_view data)> sink;
  // The line reporting `n` dropped lines, with its newline.
  std::function<std::string(uint64_t n)> dropped_line;
  size_t max_queued_bytes = 4 << 20;
};

// Thread safe.
class LineWriter {
 public:
  explicit LineWriter(LineWriterOptions options);
  LineWriter(const LineWriter&) = delete;
  LineWriter& operator=(const LineWriter&) = delete;
  // Writes what is queued (waiting at most Flush()'s default) and joins the
  // thread. The process-wide logger is never destroyed, so threads still
  // logging while the process exits find it alive.
  ~LineWriter();

  // Queues `line`, which ends in '\n'. Never waits for the sink.
  void Append(std::string line);

  // Returns once every line appended before the call has been written (or
  // refused by the sink), or after `max_wait`.
  void Flush(absl::Duration max_wait = absl::Seconds(2));

 private:
  bool StartedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Run();

  const LineWriterOptions options_;
  absl::Mutex mu_;
  std::string queued_ ABSL_GUARDED_BY(mu_);
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  // Bytes of lines queued, and of those written, since the start.
  uint64_t appended_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t written_ ABSL_GUARDED_BY(mu_) = 0;
  int flushes_waiting_ ABSL_GUARDED_BY(mu_) = 0;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool start_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace fencegate

#endif  // OBSERVABILITY_LINE_WRITER_H_
