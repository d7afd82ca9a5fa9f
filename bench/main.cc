// Copyright fencegate authors.
//
// fencegate-bench: measures the gateway against direct PostgreSQL and
// pgbouncer (throughput), and shows that no stale write lands (safety).
// See docs/benchmarks.md.

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "bench/bench.h"
#include "bench/chaos.h"
#include "bench/classifier.h"
#include "bench/memory.h"
#include "bench/safety.h"
#include "bench/throughput.h"
#include "fencegate/common/flag_args.h"

namespace fencegate::bench {
namespace {

constexpr char kUsage[] =
    "Starts a throwaway PostgreSQL, pgbouncer (if installed) and a gateway\n"
    "unless given DSNs, runs the scenario, prints a summary table (with CPU\n"
    "time and context switches per write, per process), and writes\n"
    "JSON and an SVG latency plot. `safety` exits 1 if the gateway let a\n"
    "stale write land or lost an acknowledged one, or if the unfenced run\n"
    "showed no violation (the checker would be blind). `memory` reports the\n"
    "gateway's resident memory as fenced domains grow (--domains,\n"
    "--name_bytes). `chaos` runs the safety workload on two gateways while\n"
    "killing them (kill -9, --cycles times), restarting PostgreSQL and\n"
    "pausing a gateway, then checks every acknowledged write; it exits 1\n"
    "on any lost, stale or duplicated write. `classifier` times the\n"
    "PostgreSQL route's SQL classifier on a cache hit and a miss (--rounds).\n"
    "'-' and '_' are one in flag names. docs/benchmarks.md has the rest.";

// "-" for an unknown figure.
std::string Cell(double v, const absl::FormatSpec<double>& format = "%.0f") {
  return v < 0 ? "-" : absl::StrFormat(format, v);
}

void PrintThroughput(const std::vector<RunStats>& runs, int rounds) {
  // With rounds, a column says which round a run belongs to.
  const std::string round_head = rounds > 1 ? "  r" : "";
  std::printf(
      "\n%-17s %-9s %4s%s %8s %7s %7s %8s %6s %6s %6s | %-27s | %-11s %4s\n",
      "", "", "", std::string(round_head.size(), ' ').c_str(), "", "", "", "",
      "", "", "", "CPU us per write", "switches/w", "");
  std::printf(
      "%-17s %-9s %4s%s %8s %7s %7s %8s %6s %6s %6s | %6s %6s %6s %6s | %5s "
      "%5s %4s\n",
      "target", "pattern", "N", round_head.c_str(), "ops/s", "p50 us", "p99 us",
      "p99.9 us", "errors", "vs dir", "vs pl", "server", "gw", "pg", "client",
      "gw", "pg", "busy");
  for (const RunStats& r : runs) {
    const double vs_direct = VsDirect(runs, r);
    std::printf(
        "%-17s %-9s %4d%s %8.0f %7.0f %7.0f %8.0f %6llu %6s %6s | %6s %6s %6s "
        "%6s | %5s %5s %3.0f%%\n",
        r.target.c_str(), r.pattern.c_str(), r.clients,
        rounds > 1 ? absl::StrFormat(" %2d", r.round + 1).c_str() : "",
        r.ops_per_s(), r.Percentile(50), r.Percentile(99), r.Percentile(99.9),
        static_cast<unsigned long long>(r.errors),
        Cell(vs_direct, "%.2fx").c_str(),
        Cell(VsPlain(runs, r), "%.2fx").c_str(),
        Cell(r.ServerCpuPerWriteUs()).c_str(),
        Cell(r.CpuPerWriteUs(r.cpu.gateway)).c_str(),
        Cell(r.CpuPerWriteUs(r.cpu.postgres)).c_str(),
        Cell(r.CpuPerWriteUs(r.cpu.harness)).c_str(),
        Cell(r.SwitchesPerWrite(r.cpu.gateway), "%.1f").c_str(),
        Cell(r.SwitchesPerWrite(r.cpu.postgres), "%.1f").c_str(),
        100 * r.MachineBusy());
    if (!r.first_error.empty()) {
      std::printf("    first error: %s\n", r.first_error.c_str());
    }
  }
  if (rounds <= 1) return;
  std::printf(
      "\nMedians over %d rounds (vs dir, vs pl: each round against its own "
      "direct run, and a variant (-seq, -mtls, -metrics) against its plain "
      "target's; lowest and highest alongside)\n",
      rounds);
  std::printf(
      "%-17s %-9s %4s %8s %7s %7s %6s %11s %6s %11s | %-27s | %5s %4s\n", "",
      "", "", "", "", "", "", "", "", "", "CPU us per write", "sw/w", "");
  std::printf(
      "%-17s %-9s %4s %8s %7s %7s %6s %11s %6s %11s | %6s %6s %6s %6s | %5s "
      "%4s\n",
      "target", "pattern", "N", "ops/s", "p50 us", "p99 us", "vs dir", "range",
      "vs pl", "range", "server", "gw", "pg", "client", "gw", "busy");
  auto range = [](double median, double min, double max) {
    return median < 0 ? std::string("-")
                      : absl::StrFormat("%.2f-%.2f", min, max);
  };
  for (const RoundsSummary& m : SummarizeRounds(runs)) {
    std::printf(
        "%-17s %-9s %4d %8.0f %7.0f %7.0f %6s %11s %6s %11s | %6s %6s %6s %6s "
        "| %5s %4s\n",
        m.target.c_str(), m.pattern.c_str(), m.clients, m.ops_per_s, m.p50_us,
        m.p99_us, Cell(m.vs_direct, "%.2fx").c_str(),
        range(m.vs_direct, m.vs_direct_min, m.vs_direct_max).c_str(),
        Cell(m.vs_plain, "%.2fx").c_str(),
        range(m.vs_plain, m.vs_plain_min, m.vs_plain_max).c_str(),
        Cell(m.server_cpu_us).c_str(), Cell(m.gateway_cpu_us).c_str(),
        Cell(m.postgres_cpu_us).c_str(), Cell(m.client_cpu_us).c_str(),
        Cell(m.gateway_switches, "%.1f").c_str(),
        m.busy < 0 ? "-" : absl::StrFormat("%.0f%%", 100 * m.busy).c_str());
  }
}

std::string SafetyJson(const std::vector<SafetyResult>& results) {
  std::string out = "  \"safety\": [\n";
  for (size_t i = 0; i < results.size(); ++i) {
    const SafetyResult& r = results[i];
    absl::StrAppend(
        &out,
        absl::StrFormat(
            "    {\"source\": \"%s\", \"mode\": \"%s\", \"holdings\": %d, "
            "\"pauses\": %d, "
            "\"attempted\": %d, \"acknowledged\": %d, \"refused_stale\": %d, "
            "\"errors\": %d, \"pg_rows\": %d, \"pg_violations\": %d, "
            "\"pg_missing\": %d, \"file_lines\": %d, \"file_violations\": %d, "
            "\"file_missing\": %d}%s\n",
            r.source, r.mode, r.holdings, r.pauses, r.attempted, r.acknowledged,
            r.refused_stale, r.errors, r.pg_rows, r.pg_violations, r.pg_missing,
            r.file_lines, r.file_violations, r.file_missing,
            i + 1 < results.size() ? "," : ""));
  }
  return out + "  ]";
}

int Run(int argc, char** argv) {
  std::string targets =
      "direct,direct-fenced,pgbouncer,gateway-pg,gateway-pgwire,file-direct,"
      "gateway-file,"
      "gateway-noop,grpc-floor";
  std::string clients = "1,16,64";
  std::string patterns = "steady,advancing";
  uint64_t duration_s = 5, safety_s = 8, workers = 4, ttl_ms = 300, rounds = 1;
  std::string memory_domains, memory_names;
  std::string pg_dsn, pgbouncer_dsn, json = "bench-results.json",
                                     svg = "bench-latency.svg";
  std::string work_dir = "/tmp";
  std::string command;
  std::vector<std::string> gateway_flags;
  uint64_t pg_pool_size = 4;
  std::string pg_route_params;
  bool pg_fast = false;
  bool thread_switches = false;
  uint64_t cycles = 10, chaos_seed = 1;
  std::string chaos_sources = "lease,etcd,redis,redlock,postgres,zookeeper";
  std::string chaos_retry = "seq";
  CLI::App app(kUsage, "fencegate-bench");
  app.add_option("command", command,
                 "throughput, safety, all, memory, chaos or classifier")
      ->required()
      ->check(CLI::IsMember(
          {"throughput", "safety", "all", "memory", "chaos", "classifier"}));
  app.add_option(
      "--targets", targets,
      "comma list of direct, direct-fenced, pgbouncer, gateway-pg, "
      "gateway-pgwire, file-direct, gateway-file, gateway-noop, grpc-floor, "
      "gateway-pg-seq, gateway-file-seq (every write with a seq), "
      "gateway-pg-mtls, gateway-noop-mtls, gateway-pg-metrics, "
      "gateway-noop-metrics (default all but the -seq, -mtls and -metrics "
      "ones)");
  app.add_option("--clients", clients,
                 "comma list of client counts (default 1,16,64)");
  app.add_option("--patterns", patterns, "steady,advancing (default both)");
  app.add_option("--duration_s", duration_s,
                 "seconds per throughput run (default 5)");
  app.add_option("--rounds", rounds,
                 "repeat the throughput runs of each client count this many "
                 "times, and add medians (default 1)");
  app.add_option("--safety_s", safety_s, "seconds per safety run (default 8)");
  app.add_option("--workers", workers,
                 "safety: contending workers (default 4)");
  app.add_option("--ttl_ms", ttl_ms,
                 "safety, chaos: lease ttl (default 300; etcd uses 2 s)");
  app.add_option("--pg_dsn", pg_dsn, "existing PostgreSQL (libpq DSN)");
  app.add_flag("--pg_fast", pg_fast,
               "the throwaway PostgreSQL runs with fsync=off (default: on, "
               "PostgreSQL's own durability)");
  app.add_flag("--thread_switches", thread_switches,
               "throughput: print the gateway's context switches per write "
               "by thread name after each run");
  app.add_option("--pgbouncer_dsn", pgbouncer_dsn,
                 "existing pgbouncer (libpq DSN)");
  app.add_option("--json", json,
                 "JSON output file (default bench-results.json)");
  app.add_option("--svg", svg,
                 "SVG latency histograms (default bench-latency.svg)");
  app.add_option("--work_dir", work_dir,
                 "where the gateway keeps its data "
                 "(default /tmp; a fresh subdirectory)");
  app.add_option("--gateway_flag", gateway_flags,
                 "extra flag for the started gateway, repeatable "
                 "(e.g. --gateway_flag=--io_threads=8)")
      ->allow_extra_args(false);
  app.add_option("--pg_pool_size", pg_pool_size,
                 "pool_size of the gateway's PostgreSQL route (default 4)");
  app.add_option("--pg_route_params", pg_route_params,
                 "more settings of the gateway's PostgreSQL route, as a URI "
                 "query (e.g. held_domains=0)");
  app.add_option("--domains", memory_domains,
                 "memory: checkpoints, total domains fenced (default "
                 "10000,100000,250000,500000,1000000)");
  app.add_option("--name_bytes", memory_names,
                 "memory: domain name lengths (default 12,500)");
  app.add_option("--cycles", cycles, "chaos: gateway kills (default 10)");
  app.add_option("--seed", chaos_seed,
                 "chaos: seed of the fault moments (default 1)");
  app.add_option("--retry", chaos_retry,
                 "chaos: how a write whose outcome is unknown is retried: seq "
                 "(with its (token, seq); default), plain (without a seq: "
                 "the checker then finds duplicates) or none")
      ->check(CLI::IsMember({"seq", "plain", "none"}));
  app.add_option("--sources", chaos_sources,
                 "chaos: token sources (default all: lease,etcd,redis,redlock,"
                 "postgres,zookeeper; those without a server are left out)");
  if (std::optional<int> exit = ParseFlags(app, argc, argv)) return *exit;
  if (command == "classifier") {
    return RunClassifier(
        rounds < 1 ? 1 : static_cast<int>(std::min<uint64_t>(rounds, 100)));
  }
  if (command == "chaos") {
    ChaosOptions copts;
    if (cycles == 0 || cycles > 10000) {
      std::cerr << "fencegate-bench: --cycles: 1 to 10000\n";
      return 2;
    }
    copts.cycles = static_cast<int>(cycles);
    copts.seed = chaos_seed;
    copts.retry = chaos_retry;
    copts.sources = absl::StrSplit(chaos_sources, ',', absl::SkipEmpty());
    copts.ttl = absl::Milliseconds(ttl_ms);
    return RunChaosCommand(copts, work_dir, pg_dsn, json);
  }
  if (command == "memory") {
    MemoryOptions mopts;
    mopts.work_dir = work_dir;
    mopts.gateway_flags = gateway_flags;
    if (!memory_domains.empty()) {
      mopts.checkpoints.clear();
      for (absl::string_view d :
           absl::StrSplit(memory_domains, ',', absl::SkipEmpty())) {
        int64_t n = 0;
        if (!absl::SimpleAtoi(d, &n) || n < 1 ||
            (!mopts.checkpoints.empty() && n <= mopts.checkpoints.back())) {
          std::cerr << "fencegate-bench: --domains: ascending counts\n";
          return 2;
        }
        mopts.checkpoints.push_back(n);
      }
    }
    if (!memory_names.empty()) {
      mopts.name_bytes.clear();
      for (absl::string_view b :
           absl::StrSplit(memory_names, ',', absl::SkipEmpty())) {
        int n = 0;
        if (!absl::SimpleAtoi(b, &n) || n < 8 || n > 512) {
          std::cerr << "fencegate-bench: --name_bytes: 8 to 512\n";
          return 2;
        }
        mopts.name_bytes.push_back(n);
      }
    }
    return RunMemory(mopts);
  }
  ThroughputOptions topts;
  topts.targets = absl::StrSplit(targets, ',', absl::SkipEmpty());
  topts.patterns = absl::StrSplit(patterns, ',', absl::SkipEmpty());
  topts.clients.clear();
  for (absl::string_view c : absl::StrSplit(clients, ',', absl::SkipEmpty())) {
    int n = 0;
    if (!absl::SimpleAtoi(c, &n) || n < 1 || n > 1024) {
      std::cerr << "fencegate-bench: --clients: \"" << c
                << "\" is not 1..1024\n";
      return 2;
    }
    topts.clients.push_back(n);
  }
  for (const std::string& p : topts.patterns) {
    if (p != "steady" && p != "advancing") {
      std::cerr << "fencegate-bench: --patterns: \"" << p
                << "\" is neither steady nor advancing\n";
      return 2;
    }
  }
  // A repeated entry would run twice and be taken for a round.
  auto repeated = [](auto list) {
    std::sort(list.begin(), list.end());
    return std::adjacent_find(list.begin(), list.end()) != list.end();
  };
  if (repeated(topts.targets) || repeated(topts.patterns) ||
      repeated(topts.clients)) {
    std::cerr << "fencegate-bench: --targets, --patterns and --clients take "
                 "each entry once (use --rounds to repeat runs)\n";
    return 2;
  }
  if (duration_s == 0 || duration_s > 3600) {
    std::cerr << "fencegate-bench: --duration_s: 1 to 3600\n";
    return 2;
  }
  topts.duration = absl::Seconds(duration_s);
  if (rounds == 0 || rounds > 100) {
    std::cerr << "fencegate-bench: --rounds: 1 to 100\n";
    return 2;
  }
  topts.rounds = static_cast<int>(rounds);
  topts.thread_switches = thread_switches;
  if (pg_pool_size == 0 || pg_pool_size > 1000) {
    std::cerr << "fencegate-bench: --pg_pool_size: 1 to 1000\n";
    return 2;
  }

  std::string dir = absl::StrCat(work_dir, "/fgbench-XXXXXX");
  if (::mkdtemp(dir.data()) == nullptr) {
    std::cerr << "fencegate-bench: cannot create a directory in " << work_dir
              << "\n";
    return 1;
  }
  EnvironmentOptions eopts{pg_dsn, pgbouncer_dsn, dir, gateway_flags};
  eopts.pg_pool_size = pg_pool_size;
  eopts.pg_route_params = pg_route_params;
  eopts.pg_fast = pg_fast;
  // Throughput alone needs no lock service: the gateway then follows none,
  // and an etcd watcher's gRPC threads (which poll the gateway's sockets
  // too) are not measured with every Write.
  if (command == "throughput") {
    eopts.start_etcd = false;
    eopts.start_redis = false;
    eopts.start_zookeeper = false;
  }
  for (const std::string& t : topts.targets) {
    eopts.start_mtls_gateway |= absl::EndsWith(t, "-mtls");
    eopts.start_metrics_gateway |= absl::EndsWith(t, "-metrics");
  }
  std::fprintf(stderr, "fencegate-bench: starting servers in %s\n",
               dir.c_str());
  absl::StatusOr<std::unique_ptr<Environment>> env = Environment::Start(eopts);
  if (!env.ok()) {
    std::cerr << "fencegate-bench: " << env.status().message() << "\n";
    return 1;
  }

  const std::string postgres = !pg_dsn.empty() ? "given (--pg_dsn)"
                               : pg_fast ? "throwaway, fsync=off (--pg_fast)"
                                         : "throwaway, fsync=on";
  std::printf("PostgreSQL: %s\n", postgres.c_str());
  std::vector<RunStats> runs;
  if (command != "safety") {
    absl::StatusOr<std::vector<RunStats>> t = RunThroughput(**env, topts);
    if (!t.ok()) {
      std::cerr << "fencegate-bench: " << t.status().message() << "\n";
      return 1;
    }
    runs = *std::move(t);
    PrintThroughput(runs, topts.rounds);
  }
  std::vector<SafetyResult> safety;
  int rc = 0;
  if (command != "throughput") {
    std::vector<std::string> sources = {"lease"};
    if (!(*env)->etcd_endpoint().empty()) sources.push_back("etcd");
    if (!(*env)->redis_endpoints().empty()) {
      sources.push_back("redis");
      sources.push_back("redlock");
    }
    sources.push_back("postgres");
    if (!(*env)->zookeeper_endpoint().empty()) sources.push_back("zookeeper");
    for (const std::string& source : sources) {
      SafetyOptions sopts;
      sopts.source = source;
      sopts.workers = static_cast<int>(workers);
      sopts.duration = absl::Seconds(safety_s);
      if (source == "etcd") {
        // etcd leases are whole seconds, at least its minimum.
        sopts.ttl = absl::Seconds(2);
        sopts.pause_ttls = 2;
      } else if (source == "zookeeper") {
        // The session timeout: at least the server's minimum (1 s here).
        sopts.ttl = absl::Seconds(1);
        sopts.pause_ttls = 3;
      } else {
        sopts.ttl = absl::Milliseconds(ttl_ms);
      }
      for (bool fenced : {false, true}) {
        std::fprintf(
            stderr, "  safety %s %s: %d workers, ttl %lldms, %llus...\n",
            source.c_str(), fenced ? "through the gateway" : "direct, unfenced",
            sopts.workers,
            static_cast<long long>(absl::ToInt64Milliseconds(sopts.ttl)),
            static_cast<unsigned long long>(safety_s));
        absl::StatusOr<SafetyResult> r = RunSafety(**env, sopts, fenced);
        if (!r.ok()) {
          std::cerr << "fencegate-bench: " << r.status().message() << "\n";
          return 1;
        }
        safety.push_back(*r);
      }
    }
    std::printf("\n%-9s %-8s %8s %6s %9s %6s %7s %8s %8s %8s %8s\n", "source",
                "mode", "holdings", "pauses", "attempted", "acked", "refused",
                "pg_viol", "pg_miss", "file_vio", "file_mis");
    for (const SafetyResult& r : safety) {
      std::printf(
          "%-9s %-8s %8llu %6llu %9llu %6llu %7llu %8llu %8llu %8llu %8llu\n",
          r.source.c_str(), r.mode.c_str(), (unsigned long long)r.holdings,
          (unsigned long long)r.pauses, (unsigned long long)r.attempted,
          (unsigned long long)r.acknowledged,
          (unsigned long long)r.refused_stale,
          (unsigned long long)r.pg_violations, (unsigned long long)r.pg_missing,
          (unsigned long long)r.file_violations,
          (unsigned long long)r.file_missing);
    }
    for (size_t i = 0; i + 1 < safety.size(); i += 2) {
      const SafetyResult& direct = safety[i];
      const SafetyResult& gateway = safety[i + 1];
      if (gateway.violations() != 0) {
        std::printf("FAIL (%s): the gateway let %llu violations through\n",
                    gateway.source.c_str(),
                    (unsigned long long)gateway.violations());
        rc = 1;
      } else if (direct.pg_violations + direct.file_violations == 0) {
        std::printf(
            "FAIL (%s): the unfenced run showed no violation; the "
            "checker cannot be trusted (no pause overlapped a "
            "handover)\n",
            direct.source.c_str());
        rc = 1;
      } else {
        std::printf(
            "OK (%s): unfenced writes produced %llu violations; "
            "through the gateway 0\n",
            direct.source.c_str(),
            static_cast<unsigned long long>(direct.pg_violations) +
                direct.file_violations);
      }
    }
  }
  std::string postgres_json =
      absl::StrCat("  \"postgres\": \"", postgres, "\"");
  if (!safety.empty())
    absl::StrAppend(&postgres_json, ",\n", SafetyJson(safety));
  std::ofstream(json) << ToJson(runs, postgres_json);
  if (!runs.empty()) {
    std::ofstream(svg) << ToSvg(runs,
                                "fencegate-bench: write latency histograms");
  }
  std::fprintf(stderr, "fencegate-bench: wrote %s%s\n", json.c_str(),
               runs.empty() ? "" : absl::StrCat(" and ", svg).c_str());
  env->reset();  // Stop the servers before removing their files.
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return rc;
}

}  // namespace
}  // namespace fencegate::bench

int main(int argc, char** argv) {
#ifdef NDEBUG
  // As in the gateway: Debian's Abseil checks every Mutex acquisition for
  // deadlocks under a global lock; the harness's gRPC clients pay for it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  try {
    if (argc > 1 && std::string(argv[1]) == "safety-worker") {
      return fencegate::bench::SafetyWorkerMain(argc, argv);
    }
    if (argc > 1 && std::string(argv[1]) == "chaos-worker") {
      return fencegate::bench::ChaosWorkerMain(argc, argv);
    }
    return fencegate::bench::Run(argc, argv);
  } catch (const std::exception& e) {
    // A flag declared twice (a bug here) or memory exhausted.
    std::cerr << "fencegate-bench: " << e.what() << "\n";
    return 1;
  }
}
