// Copyright fencegate authors.
//
// The chaos scenario: the safety workload under faults. Worker processes
// take locks from every token source available (the gateway's lease
// service, etcd, Redis, Redlock, a PostgreSQL lock table, ZooKeeper), one
// lock per source. A new holder first fences its token on both gateways,
// then writes each record to PostgreSQL through either gateway (chosen at
// random), appends it to a file through the first gateway (a file route is
// fenced by its own gateway only), and writes it to PostgreSQL again
// through either gateway's PostgreSQL port, in a session of its token. Some
// holders are stopped past their lease right after checking it, and write late.
// Meanwhile a fault schedule runs, one fault at a time:
//   - kill -9 of the first gateway (most cycles) or of the second (every
//     third), each at a random moment, followed by a restart on the same
//     port and data directory;
//   - every fifth cycle, a PostgreSQL restart, -m fast and -m immediate in
//     turn;
//   - every fourth cycle, SIGSTOP of the first gateway for three times the
//     longest lease ttl of the sources, then SIGCONT.
// A write whose outcome is unknown is retried with its (token, seq)
// (ChaosOptions::retry). Then the checker (chaos_checker.h) compares what
// the clients recorded with what the table and the files hold.

#ifndef BENCH_CHAOS_H_
#define BENCH_CHAOS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bench/bench.h"
#include "bench/chaos_checker.h"

namespace fencegate::bench {

struct ChaosOptions {
  // Gateway kills (each one cycle). Default: 10.
  int cycles = 10;
  // Token sources to take locks from; those whose server is not available
  // are left out (and reported). Default: all.
  std::vector<std::string> sources = {"lease",   "etcd",     "redis",
                                      "redlock", "postgres", "zookeeper"};
  int workers_per_source = 2;
  // Lease ttl of the workers' locks (at least 2 s for etcd, 1 s for
  // ZooKeeper).
  absl::Duration ttl = absl::Milliseconds(300);
  // Share of holdings in which the holder is paused for 3 ttls.
  double pause_fraction = 0.3;
  int writes_per_holding = 4;
  // Seed of the fault schedule's random moments.
  uint64_t seed = 1;
  // How the workers retry a write whose outcome is unknown: "seq" (with its
  // (token, seq): the storage applies it once), "plain" (without a seq:
  // the duplicates the checker then finds show it can see them), "none".
  std::string retry = "seq";
};

struct ChaosResult {
  std::vector<std::string> sources;  // Those that ran.
  ChaosCounts counts;
  uint64_t kills = 0, pg_restarts = 0, gateway_pauses = 0;
  // Kills after which the gateway's fence store was deleted before it
  // started again (it must recover its fences from the routes' storage).
  uint64_t fence_stores_lost = 0;
  std::vector<double> restart_ms;    // Each restart: spawn to serving.
  std::vector<double> pg_outage_ms;  // Each PostgreSQL restart.
  uint64_t holdings = 0, late_holders = 0;
  std::string retry;
  // Writes sent more than once, and those answered as replayed.
  uint64_t retried = 0, replayed = 0;
  // Why the run cannot vouch for anything, if it cannot: a source that never
  // held its lock, a route without an acknowledged write, late holders none
  // of whose writes was refused. A blind run fails like a violation.
  std::vector<std::string> blind;
};

// Runs the scenario in `env` (started without a gateway).
absl::StatusOr<ChaosResult> RunChaos(Environment& env,
                                     const ChaosOptions& options);

// The summary table, and the JSON of --json.
void PrintChaos(const ChaosResult& result);
std::string ChaosJson(const ChaosResult& result);

// `fencegate-bench chaos`: starts the servers (PostgreSQL unless `pg_dsn`)
// in a fresh directory under `work_dir`, runs, prints the table and writes
// `json` (if not empty). Exit code: 0, or 1 on any violation, a blind run
// or a failure.
int RunChaosCommand(const ChaosOptions& options, const std::string& work_dir,
                    const std::string& pg_dsn, const std::string& json);

// Entry point of one worker process ("fencegate-bench chaos-worker ...").
int ChaosWorkerMain(int argc, char** argv);

}  // namespace fencegate::bench

#endif  // BENCH_CHAOS_H_
