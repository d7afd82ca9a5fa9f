// Copyright fencegate authors.
//
// The safety scenario: M worker processes contend for one lock with a short
// ttl, taken from a token source (the gateway's lease service, or etcd).
// Some holders are paused past their lease right after checking it — the
// whole process, keep-alive threads included, is stopped with SIGSTOP and
// resumed with SIGCONT, as a long GC pause would stop it — and then write.
// Every write goes to a PostgreSQL table and to a file, through the gateway
// (fenced) or directly (unfenced). A checker then reads both histories back
// and counts violations: writes applied with a token lower than one applied
// before them, and acknowledged writes that are missing.

#ifndef BENCH_SAFETY_H_
#define BENCH_SAFETY_H_

#include <cstdint>
#include <string>

#include "bench/bench.h"

namespace fencegate::bench {

struct SafetyOptions {
  // "lease" (built-in lease service), "etcd", "redis", "redlock" or
  // "postgres" (a lock table in the environment's PostgreSQL) or
  // "zookeeper".
  std::string source = "lease";
  int workers = 4;
  // Lease ttl. etcd rounds it up to whole seconds and to its minimum.
  absl::Duration ttl = absl::Milliseconds(300);
  // Share of lock holdings in which the worker is paused past its lease.
  double pause_fraction = 0.5;
  // Pause length, as a multiple of ttl.
  int pause_ttls = 4;
  // Writes per holding.
  int writes_per_holding = 4;
  absl::Duration duration = absl::Seconds(8);
};

struct SafetyResult {
  std::string source;
  std::string mode;  // "gateway" or "direct".
  uint64_t attempted = 0, acknowledged = 0, refused_stale = 0, errors = 0;
  uint64_t holdings = 0, pauses = 0;
  uint64_t pg_rows = 0, pg_violations = 0, pg_missing = 0;
  uint64_t file_lines = 0, file_violations = 0, file_missing = 0;
  uint64_t violations() const {
    return pg_violations + pg_missing + file_violations + file_missing;
  }
};

// `fenced`: through the gateway; otherwise straight to PostgreSQL and the
// file. Runs the workers as child processes of this binary.
absl::StatusOr<SafetyResult> RunSafety(Environment& env,
                                       const SafetyOptions& options,
                                       bool fenced);

// Stops this whole process -- every thread, keep-alive included -- for `d`,
// as a stop-the-world GC pause would: a child process sends SIGCONT when the
// time is up. Used by the safety and chaos workers.
void PauseWholeProcess(absl::Duration d);

// Entry point of one worker process ("fencegate-bench safety-worker ...").
int SafetyWorkerMain(int argc, char** argv);

}  // namespace fencegate::bench

#endif  // BENCH_SAFETY_H_
