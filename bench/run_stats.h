// Copyright fencegate authors.
//
// The figures of throughput runs, and the reports made from them: ratios
// to `direct`, medians over repeated rounds, JSON and SVG.

#ifndef BENCH_RUN_STATS_H_
#define BENCH_RUN_STATS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "bench/cpu_meter.h"

namespace fencegate::bench {

// One run: a target, a token pattern and a client count, for a set time.
struct RunStats {
  std::string target;
  std::string pattern;
  int clients = 0;
  // Which repetition of the whole sequence of runs this is, from 0
  // (--rounds).
  int round = 0;
  double seconds = 0;
  uint64_t ops = 0;
  uint64_t errors = 0;
  std::string first_error;
  // CPU used during the timed part of the run.
  CpuTimes cpu;
  std::vector<uint32_t> latencies_us;  // Sorted after Finish().

  void Finish();
  double ops_per_s() const { return seconds > 0 ? ops / seconds : 0; }
  // CPU microseconds and context switches per successful write of a
  // process (a CpuTimes field), or -1 if unknown or no write succeeded.
  double CpuPerWriteUs(const ProcessUsage& usage) const;
  double SwitchesPerWrite(const ProcessUsage& usage) const;
  // The gateway's context switches per write by thread name, busiest
  // first: "  name×threads switches ..."; those under 0.005 left out.
  std::string ThreadSwitchesLine() const;
  // CPU microseconds per write of whatever served it: the gateway,
  // PostgreSQL and pgbouncer (the ones a write did not go through sit
  // idle); -1 if none is known.
  double ServerCpuPerWriteUs() const;
  // The machine's cores that were busy, as a fraction of all of them.
  double MachineBusy() const;
  double Percentile(double p) const;  // In microseconds.
};

// `r`'s throughput over that of the `direct` run of the same pattern,
// client count and round in `runs`; -1 if there is none (or it wrote
// nothing).
double VsDirect(const std::vector<RunStats>& runs, const RunStats& r);

// The target a variant target adds one thing to: `target` without its
// "-seq", "-mtls" or "-metrics" suffix ("gateway-file-seq" ->
// "gateway-file"); "" for a target that is no variant.
std::string PlainTargetOf(const std::string& target);

// `r`'s throughput over that of its plain target's run (PlainTargetOf) of
// the same pattern, client count and round in `runs`: what the variant's
// addition costs, measured within one round; -1 if there is none.
double VsPlain(const std::vector<RunStats>& runs, const RunStats& r);

// The runs of one target, pattern and client count over every round:
// medians, and the spread of the ratios to direct and to the plain target.
struct RoundsSummary {
  std::string target;
  std::string pattern;
  int clients = 0;
  int rounds = 0;
  // Medians over the rounds; -1 where no round has the figure.
  double ops_per_s = 0;
  double p50_us = 0;
  double p99_us = 0;
  // CPU microseconds per write (RunStats::ServerCpuPerWriteUs and
  // CpuPerWriteUs of each process), the gateway's context switches per
  // write, and the share of the machine's cores busy.
  double server_cpu_us = -1, gateway_cpu_us = -1, postgres_cpu_us = -1,
         client_cpu_us = -1;
  double gateway_switches = -1;
  double busy = -1;
  // Median, lowest and highest ratio to direct of the same round; -1 if
  // there is no direct run.
  double vs_direct = -1, vs_direct_min = -1, vs_direct_max = -1;
  // The same for the ratio to the plain target (VsPlain).
  double vs_plain = -1, vs_plain_min = -1, vs_plain_max = -1;
};

// One summary per target, pattern and client count, in the order of their
// first run in `runs`.
std::vector<RoundsSummary> SummarizeRounds(const std::vector<RunStats>& runs);

// Writes `runs` (and, with more than one round, their summaries) as a JSON
// document; `extra` is spliced in as more fields.
std::string ToJson(const std::vector<RunStats>& runs,
                   const std::string& extra_json_fields);
// SVG latency histograms: a panel per target and pattern, an outline per
// client count (the rounds' histograms averaged), log-spaced bins (10 us
// to 10 s).
std::string ToSvg(const std::vector<RunStats>& runs, const std::string& title);

}  // namespace fencegate::bench

#endif  // BENCH_RUN_STATS_H_
