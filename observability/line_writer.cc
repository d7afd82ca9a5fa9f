// Copyright fencegate authors.

#include "observability/line_writer.h"

#include <signal.h>

#include <algorithm>
#include <exception>
#include <thread>
#include <utility>

#include "fencegate/common/thread_name.h"

namespace fencegate {
namespace {

// The writer waits this long after a first line, or until this much is
// queued, before writing.
constexpr absl::Duration kGatherTime = absl::Milliseconds(2);
constexpr size_t kGatherBytes = 64 << 10;

}  // namespace

LineWriter::LineWriter(LineWriterOptions options)
    : options_(std::move(options)) {}

LineWriter::~LineWriter() {
  Flush();
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void LineWriter::Append(std::string line) {
  absl::MutexLock lock(&mu_);
  if (!StartedLocked()) {
    // No writer thread: write here, as a last resort.
    options_.sink(line);
    return;
  }
  if (queued_.size() + line.size() > options_.max_queued_bytes) {
    ++dropped_;
    return;
  }
  queued_ += line;
  appended_ += line.size();
}

void LineWriter::Flush(absl::Duration max_wait) {
  absl::MutexLock lock(&mu_);
  if (!started_) return;
  const uint64_t target = appended_;
  ++flushes_waiting_;
  auto done = [this, target]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return written_ >= target;
  };
  // A sink that accepts nothing must not hold up the caller for ever.
  mu_.AwaitWithTimeout(absl::Condition(&done), max_wait);
  --flushes_waiting_;
}

bool LineWriter::StartedLocked() {
  if (started_ || start_failed_) return started_;
  try {
    thread_ = std::thread([this] { Run(); });
    started_ = true;
  } catch (const std::exception&) {
    start_failed_ = true;
  }
  return started_;
}

void LineWriter::Run() {
  NameThisThread(options_.thread_name);
  // Signals are for the threads that handle them (the gateway's main thread
  // waits for SIGTERM and SIGHUP), whatever thread happened to log first.
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
        return !queued_.empty() || dropped_ > 0 || stopping_;
      };
      mu_.Await(absl::Condition(&ready));
      if (queued_.empty() && dropped_ == 0 && stopping_) return;
      // Gather lines for a moment, unless there are many or someone waits
      // for them: the writer then wakes once per burst, not once per line.
      auto full = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return queued_.size() >= kGatherBytes || flushes_waiting_ > 0 ||
               stopping_;
      };
      mu_.AwaitWithTimeout(absl::Condition(&full), kGatherTime);
      batch.swap(queued_);
      lines_bytes = batch.size();
      dropped = dropped_;
      dropped_ = 0;
    }
    if (dropped > 0) batch += options_.dropped_line(dropped);
    const size_t done = options_.sink(batch);
    // Lines the sink refused are lost: count them with the dropped ones,
    // for the next report.
    const uint64_t lost =
        done >= lines_bytes
            ? 0
            : std::count(batch.begin() + static_cast<ptrdiff_t>(done),
                         batch.begin() + static_cast<ptrdiff_t>(lines_bytes),
                         '\n');
    batch.clear();
    absl::MutexLock lock(&mu_);
    written_ += lines_bytes;  // Written, or given up on.
    dropped_ += lost;
  }
}

}  // namespace fencegate
