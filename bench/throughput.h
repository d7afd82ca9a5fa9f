// Copyright fencegate authors.
//
// The throughput scenario: N clients issue fenced writes for a set time
// against each target; one RunStats per (target, pattern, clients).

#ifndef BENCH_THROUGHPUT_H_
#define BENCH_THROUGHPUT_H_

#include <string>
#include <vector>

#include "bench/bench.h"

namespace fencegate::bench {

struct ThroughputOptions {
  // direct, direct-fenced, pgbouncer, gateway-pg, gateway-file, gateway-noop,
  // grpc-floor; gateway-pg-seq and gateway-file-seq are gateway-pg and
  // gateway-file with a seq in every write.
  std::vector<std::string> targets;
  std::vector<int> clients = {1, 16, 64};
  // steady (a holder keeps its token) and/or advancing (each write raises).
  std::vector<std::string> patterns = {"steady", "advancing"};
  absl::Duration duration = absl::Seconds(5);
  // How many times the whole sequence of runs of a client count is
  // repeated; the report adds medians over the rounds.
  int rounds = 1;
  // After each run, print the gateway's context switches per write by
  // thread name (stderr).
  bool thread_switches = false;
};

absl::StatusOr<std::vector<RunStats>> RunThroughput(
    Environment& env, const ThroughputOptions& options);

}  // namespace fencegate::bench

#endif  // BENCH_THROUGHPUT_H_
