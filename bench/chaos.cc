// Copyright fencegate authors.

#include "bench/chaos.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/run_stats.h"
#include "bench/token_sources.h"
#include "fencegate/v1/gateway.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "pqxx/pqxx"

namespace fencegate::bench {
namespace {

// The faultless end of a chaos run (see RunChaos).
constexpr absl::Duration kLastStretch = absl::Seconds(5);

// The two gateways: same PostgreSQL route, each its own data directory; the
// first also serves the file route and the lease service.
class Gateways {
 public:
  Gateways(Environment& env, const std::string& dir) : env_(env), dir_(dir) {}

  absl::Status StartAll() {
    for (int i = 0; i < 2; ++i) {
      ports_[i] = testing::FreeLoopbackPort();
      pg_ports_[i] = testing::FreeLoopbackPort();
      if (ports_[i] == 0 || pg_ports_[i] == 0) {
        return absl::UnavailableError("no free port");
      }
      if (absl::Status s = Start(i, nullptr); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // (Re)starts gateway `i` on its port and data directory; `ms` gets the
  // time from spawn to serving.
  absl::Status Start(int i, double* ms) {
    const std::string data = absl::StrCat(dir_, "/gateway-", i);
    std::vector<std::string> flags = {
        absl::StrCat("--listen=127.0.0.1:", ports_[i]),
        "--route=db=" + env_.pg_uri(), "--io_threads=16",
        absl::StrCat("--pg_listen=127.0.0.1:", pg_ports_[i])};
    if (i == 0) flags.push_back("--route=files=file://" + data + "/files");
    if (!env_.etcd_endpoint().empty()) {
      flags.push_back("--etcd_endpoint=" + env_.etcd_endpoint());
    }
    if (!env_.zookeeper_endpoint().empty()) {
      flags.push_back("--zookeeper_endpoint=" + env_.zookeeper_endpoint());
    }
    const absl::Time start = absl::Now();
    absl::StatusOr<std::unique_ptr<testing::GatewayProcess>> g =
        testing::GatewayProcess::Start(data, flags);
    if (!g.ok()) return g.status();
    if (ms != nullptr) *ms = absl::ToDoubleMilliseconds(absl::Now() - start);
    processes_[i] = *std::move(g);
    return absl::OkStatus();
  }

  void Kill(int i) { processes_[i]->Stop(SIGKILL); }
  // Deletes the fence store of gateway `i` (killed): its fences and leases.
  void DropFenceStore(int i) {
    std::filesystem::remove_all(absl::StrCat(dir_, "/gateway-", i, "/fence"));
  }
  pid_t pid(int i) const { return processes_[i]->pid(); }
  std::string address(int i) const {
    return absl::StrCat("127.0.0.1:", ports_[i]);
  }
  // Both gateways' PostgreSQL ports, comma-separated.
  std::string pg_ports() const {
    return absl::StrCat(pg_ports_[0], ",", pg_ports_[1]);
  }
  std::string files_dir() const { return dir_ + "/gateway-0/files"; }

 private:
  Environment& env_;
  const std::string dir_;
  int ports_[2] = {0, 0};
  int pg_ports_[2] = {0, 0};
  std::unique_ptr<testing::GatewayProcess> processes_[2];
};

// Ends the workers: writes the stop file, waits up to two minutes for them to
// finish their holding, then kills the rest. OK if all exited 0; otherwise
// INTERNAL naming the first that did not, with the end of its log
// (`logs[i]` is worker i's).
absl::Status StopWorkers(const std::string& stop_file,
                         const std::vector<pid_t>& pids,
                         const std::vector<std::string>& logs) {
  std::ofstream(stop_file) << "stop\n";
  absl::Status result;
  const absl::Time deadline = absl::Now() + absl::Minutes(2);
  for (size_t i = 0; i < pids.size(); ++i) {
    int status = 0;
    pid_t done = 0;
    while ((done = ::waitpid(pids[i], &status, WNOHANG)) == 0 &&
           absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    std::string how;
    if (done == 0) {
      ::kill(pids[i], SIGKILL);
      ::waitpid(pids[i], &status, 0);
      how = "did not stop within 2 minutes";
    } else if (done != pids[i] || !WIFEXITED(status)) {
      how = absl::StrCat("ended by signal ",
                         WIFSIGNALED(status) ? WTERMSIG(status) : -1);
    } else if (WEXITSTATUS(status) != 0) {
      how = absl::StrCat("exited ", WEXITSTATUS(status));
    }
    if (how.empty() || !result.ok()) continue;
    absl::StatusOr<std::string> log = testing::ReadFile(logs[i]);
    std::string tail = log.ok() ? *log : "(no log)";
    if (tail.size() > 2000) tail = tail.substr(tail.size() - 2000);
    result = absl::InternalError(
        absl::StrCat("chaos worker ", i + 1, " ", how, ": ", tail));
  }
  return result;
}

// Whether the sources' servers are there.
bool Available(const Environment& env, const std::string& source) {
  if (source == "etcd") return !env.etcd_endpoint().empty();
  if (source == "redis") return !env.redis_endpoints().empty();
  if (source == "redlock") return env.redis_endpoints().size() >= 3;
  if (source == "zookeeper") return !env.zookeeper_endpoint().empty();
  return source == "lease" || source == "postgres";
}

// etcd leases are whole seconds, at least its minimum (2 s); a ZooKeeper
// session at least the server's minimum (1 s here).
absl::Duration TtlOf(const std::string& source, absl::Duration ttl) {
  if (source == "etcd") return std::max(ttl, absl::Seconds(2));
  if (source == "zookeeper") return std::max(ttl, absl::Seconds(1));
  return ttl;
}

// Writes through gateway A until one succeeds: how long PostgreSQL writes
// failed, from `since`.
double PgOutageMs(const std::string& gateway, absl::Time since) {
  auto stub = v1::Gateway::NewStub(
      grpc::CreateChannel(gateway, grpc::InsecureChannelCredentials()));
  while (absl::Now() - since < absl::Seconds(120)) {
    v1::WriteRequest request;
    request.set_domain("chaos-probe");
    request.set_token(1);
    request.set_resource("db/probe");
    request.add_ops()->mutable_sql()->set_sql("SELECT 1");
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(2));
    v1::WriteResponse response;
    if (stub->Write(&context, request, &response).ok()) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::ToDoubleMilliseconds(absl::Now() - since);
}

absl::Status RunFaults(Environment& env, Gateways& gateways,
                       const ChaosOptions& options, ChaosResult* result) {
  std::mt19937_64 rng(options.seed);
  std::uniform_int_distribution<int> moment_ms(200, 1200);
  for (int cycle = 1; cycle <= options.cycles; ++cycle) {
    absl::SleepFor(absl::Milliseconds(moment_ms(rng)));
    const int victim = cycle % 3 == 0 ? 1 : 0;
    gateways.Kill(victim);
    ++result->kills;
    // Every fourth kill also loses the fence store: the restarted gateway
    // must take its fences from the database and the file root.
    const bool lost = cycle % 4 == 2;
    if (lost) {
      gateways.DropFenceStore(victim);
      ++result->fence_stores_lost;
    }
    double ms = 0;
    if (absl::Status s = gateways.Start(victim, &ms); !s.ok()) return s;
    result->restart_ms.push_back(ms);
    std::fprintf(stderr,
                 "  chaos: cycle %d: kill -9 gateway %c%s, back in %.0f ms\n",
                 cycle, victim == 0 ? 'A' : 'B',
                 lost ? " and delete its fence store" : "", ms);
    if (cycle % 4 == 0) {
      absl::SleepFor(absl::Milliseconds(moment_ms(rng)));
      // Past every source's lease: three of the longest ttl.
      absl::Duration longest = options.ttl;
      for (const std::string& source : result->sources) {
        longest = std::max(longest, TtlOf(source, options.ttl));
      }
      const absl::Duration pause = longest * 3;
      ::kill(gateways.pid(0), SIGSTOP);
      absl::SleepFor(pause);
      ::kill(gateways.pid(0), SIGCONT);
      ++result->gateway_pauses;
      std::fprintf(stderr, "  chaos: cycle %d: gateway A stopped for %s\n",
                   cycle, absl::FormatDuration(pause).c_str());
    }
    if (cycle % 5 == 0 && env.postgres() != nullptr) {
      absl::SleepFor(absl::Milliseconds(moment_ms(rng)));
      const bool immediate = result->pg_restarts % 2 == 1;
      const absl::Time since = absl::Now();
      if (absl::Status s = env.postgres()->Stop(immediate); !s.ok()) return s;
      if (absl::Status s = env.postgres()->Restart(); !s.ok()) return s;
      const double outage = PgOutageMs(gateways.address(0), since);
      result->pg_outage_ms.push_back(outage);
      ++result->pg_restarts;
      std::fprintf(stderr,
                   "  chaos: cycle %d: PostgreSQL restarted (-m %s), writes "
                   "failed for %.0f ms\n",
                   cycle, immediate ? "immediate" : "fast", outage);
    }
  }
  return absl::OkStatus();
}

// The storage's histories: table rows by sequence, file lines by position.
absl::Status ReadApplied(const Environment& env, const std::string& run,
                         const Gateways& gateways,
                         const std::vector<std::string>& locks,
                         std::vector<AppliedWrite>* applied) {
  try {
    pqxx::connection c(env.pg_dsn());
    pqxx::work tx(c);
    for (const pqxx::row& row :
         tx.exec_params("SELECT domain, token, write_id FROM chaos_history "
                        "WHERE run = $1 ORDER BY seq",
                        run)) {
      applied->push_back({"pg", row[0].as<std::string>(), row[1].as<uint64_t>(),
                          row[2].as<int64_t>()});
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(e.what());
  }
  for (const std::string& lock : locks) {
    absl::StatusOr<std::string> text = testing::ReadFile(
        absl::StrCat(gateways.files_dir(), "/", lock, ".log"));
    if (!text.ok()) continue;  // No file write of this lock landed.
    for (absl::string_view line :
         absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
      std::pair<std::string, std::string> f = absl::StrSplit(line, ' ');
      AppliedWrite a{"file", lock, 0, 0};
      if (!absl::SimpleAtoi(f.first, &a.token) ||
          !absl::SimpleAtoi(f.second, &a.write_id)) {
        return absl::DataLossError(
            absl::StrCat("torn line in ", lock, ".log: \"", line, "\""));
      }
      applied->push_back(a);
    }
  }
  return absl::OkStatus();
}

std::string Percentiles(std::vector<double> v) {
  if (v.empty()) return "-";
  std::sort(v.begin(), v.end());
  return absl::StrFormat("median %.0f, max %.0f (n=%d)", v[v.size() / 2],
                         v.back(), static_cast<int>(v.size()));
}

std::string JsonList(const std::vector<double>& v) {
  return absl::StrCat("[",
                      absl::StrJoin(v, ", ",
                                    [](std::string* out, double d) {
                                      absl::StrAppend(
                                          out, absl::StrFormat("%.1f", d));
                                    }),
                      "]");
}

}  // namespace

absl::StatusOr<ChaosResult> RunChaos(Environment& env,
                                     const ChaosOptions& options) {
  ChaosResult result;
  result.retry = options.retry;
  for (const std::string& s : options.sources) {
    if (Available(env, s)) {
      result.sources.push_back(s);
    } else {
      std::fprintf(stderr, "  chaos: source %s left out (no server)\n",
                   s.c_str());
    }
  }
  if (result.sources.empty()) return absl::FailedPreconditionError("no source");
  const std::string run =
      absl::StrCat("chaos-", absl::ToUnixMicros(absl::Now()));
  const std::string dir = env.data_dir() + "-chaos";
  if (absl::Status s = env.Exec(
          "CREATE TABLE IF NOT EXISTS chaos_history (seq bigserial PRIMARY "
          "KEY, run text, domain text, token bigint, write_id bigint)");
      !s.ok()) {
    return s;
  }
  Gateways gateways(env, dir);
  if (absl::Status s = gateways.StartAll(); !s.ok()) return s;

  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return absl::InternalError("cannot find /proc/self/exe");
  self[n] = '\0';
  const std::string stop_file = dir + "/stop";
  std::vector<std::string> locks, outs, out_sources, logs;
  std::vector<pid_t> pids;
  int id = 0;
  for (const std::string& source : result.sources) {
    const std::string lock = absl::StrCat(run, "-", source);
    locks.push_back(lock);
    for (int w = 0; w < options.workers_per_source; ++w, ++id) {
      outs.push_back(absl::StrCat(dir, "/worker-", id, ".txt"));
      out_sources.push_back(source);
      std::vector<std::string> argv = {
          self,
          "chaos-worker",
          "--gateway_b=" + gateways.address(1),
          "--lock=" + lock,
          "--run=" + run,
          "--out=" + outs.back(),
          "--stop_file=" + stop_file,
          absl::StrCat("--id=", id + 1),
          absl::StrCat("--ttl_ms=",
                       absl::ToInt64Milliseconds(TtlOf(source, options.ttl))),
          absl::StrCat("--writes=", options.writes_per_holding),
          absl::StrCat("--pause_fraction=", options.pause_fraction),
          "--retry=" + options.retry,
          "--pg_ports=" + gateways.pg_ports()};
      for (std::string& a :
           SourceArgs(env.source_flags(source, gateways.address(0)))) {
        argv.push_back(std::move(a));
      }
      // Killed with the harness should it die; output in worker-N.log.
      logs.push_back(absl::StrCat(dir, "/worker-", id, ".log"));
      const pid_t pid = testing::SpawnServer(std::move(argv), logs.back());
      if (pid < 0) {
        (void)StopWorkers(stop_file, pids, logs);
        return absl::InternalError("fork failed");
      }
      pids.push_back(pid);
    }
  }
  absl::SleepFor(absl::Seconds(1));  // Let the workers take their locks.
  const absl::Status faults = RunFaults(env, gateways, options, &result);
  // A last stretch without faults, long enough for every source's workers
  // to take their lock once more even on a loaded machine (a sanitized
  // build): a run in which a source never held is blind, and fails.
  absl::SleepFor(kLastStretch);
  const absl::Status workers = StopWorkers(stop_file, pids, logs);
  if (!faults.ok()) return faults;
  if (!workers.ok()) return workers;

  std::vector<WriteRecord> writes;
  std::vector<FenceRecord> fences;
  std::map<std::string, uint64_t> holdings_of;
  for (size_t i = 0; i < outs.size(); ++i) {
    const std::string& out = outs[i];
    absl::StatusOr<std::string> text = testing::ReadFile(out);
    if (!text.ok()) return text.status();
    std::pair<std::string, std::string> head_rest =
        absl::StrSplit(*text, absl::MaxSplits('\n', 1));
    std::vector<std::string> head = absl::StrSplit(head_rest.first, ' ');
    uint64_t holdings = 0, pauses = 0, retried = 0, replayed = 0;
    if (head.size() != 5 || !absl::SimpleAtoi(head[1], &holdings) ||
        !absl::SimpleAtoi(head[2], &pauses) ||
        !absl::SimpleAtoi(head[3], &retried) ||
        !absl::SimpleAtoi(head[4], &replayed)) {
      return absl::DataLossError("bad worker file " + out);
    }
    result.retried += retried;
    result.replayed += replayed;
    result.holdings += holdings;
    holdings_of[out_sources[i]] += holdings;
    result.late_holders += pauses;
    if (absl::Status s = ParseRecords(head_rest.second, &writes, &fences);
        !s.ok()) {
      return s;
    }
  }
  std::vector<AppliedWrite> applied;
  if (absl::Status s = ReadApplied(env, run, gateways, locks, &applied);
      !s.ok()) {
    return s;
  }
  result.counts = CheckChaos(writes, fences, applied);
  // A run that tested nothing must not pass: every source held its lock,
  // both routes acknowledged writes, and late holders were refused.
  for (const auto& [source, holdings] : holdings_of) {
    if (holdings == 0) {
      result.blind.push_back(absl::StrCat("source ", source, " never held"));
    }
  }
  for (const char* route : {"pg", "file"}) {
    const bool any = std::any_of(
        writes.begin(), writes.end(), [route](const WriteRecord& w) {
          return w.route == route &&
                 w.outcome == WriteRecord::Outcome::kAcknowledged;
        });
    if (!any) {
      result.blind.push_back(
          absl::StrCat("no ", route, " write was acknowledged"));
    }
  }
  if (result.late_holders > 0 && result.counts.refused_stale == 0) {
    result.blind.push_back("no late write was refused");
  }
  return result;
}

void PrintChaos(const ChaosResult& r) {
  const ChaosCounts& c = r.counts;
  std::printf("\nChaos: sources %s\n", absl::StrJoin(r.sources, ",").c_str());
  std::printf("  %-24s %llu\n", "acknowledged",
              static_cast<unsigned long long>(c.acknowledged));
  auto row = [](const char* name, uint64_t v) {
    std::printf("  %-24s %llu\n", name, static_cast<unsigned long long>(v));
  };
  row("lost_acknowledged", c.lost_acknowledged);
  row("stale_applied", c.stale_applied);
  row("unacknowledged_landed", c.unacknowledged_landed);
  row("duplicates", c.duplicates);
  row("refused_landed", c.refused_landed);
  row("unknown_applied", c.unknown_applied);
  row("refused_stale", c.refused_stale);
  row("errors", c.errors);
  row("fences", c.fences);
  row("holdings", r.holdings);
  row("late_holders", r.late_holders);
  std::printf("  %-24s %s\n", "retry", r.retry.c_str());
  row("retried", r.retried);
  row("replayed", r.replayed);
  row("kills", r.kills);
  row("fence_stores_lost", r.fence_stores_lost);
  row("gateway_pauses", r.gateway_pauses);
  row("pg_restarts", r.pg_restarts);
  std::printf("  %-24s %s\n", "restart_ms", Percentiles(r.restart_ms).c_str());
  std::printf("  %-24s %s\n", "pg_outage_ms",
              Percentiles(r.pg_outage_ms).c_str());
  std::printf("  %s\n",
              c.violations() == 0 ? "no lost or stale write" : "VIOLATIONS");
  // A blind run fails as well: say why.
  for (const std::string& why : r.blind) {
    std::printf("  BLIND: %s\n", why.c_str());
  }
}

std::string ChaosJson(const ChaosResult& r) {
  const ChaosCounts& c = r.counts;
  return absl::StrCat(
      "{\n  \"chaos\": {\n    \"sources\": [\"",
      absl::StrJoin(r.sources, "\", \""), "\"],\n",
      "    \"acknowledged\": ", c.acknowledged,
      ",\n    \"lost_acknowledged\": ", c.lost_acknowledged,
      ",\n    \"stale_applied\": ", c.stale_applied,
      ",\n    \"unacknowledged_landed\": ", c.unacknowledged_landed,
      ",\n    \"duplicates\": ", c.duplicates,
      ",\n    \"refused_landed\": ", c.refused_landed,
      ",\n    \"unknown_applied\": ", c.unknown_applied,
      ",\n    \"refused_stale\": ", c.refused_stale,
      ",\n    \"errors\": ", c.errors, ",\n    \"fences\": ", c.fences,
      ",\n    \"holdings\": ", r.holdings,
      ",\n    \"late_holders\": ", r.late_holders, ",\n    \"retry\": \"",
      r.retry, "\"", ",\n    \"retried\": ", r.retried,
      ",\n    \"replayed\": ", r.replayed, ",\n    \"kills\": ", r.kills,
      ",\n    \"fence_stores_lost\": ", r.fence_stores_lost,
      ",\n    \"gateway_pauses\": ", r.gateway_pauses,
      ",\n    \"pg_restarts\": ", r.pg_restarts,
      ",\n    \"restart_ms\": ", JsonList(r.restart_ms),
      ",\n    \"pg_outage_ms\": ", JsonList(r.pg_outage_ms),
      ",\n    \"violations\": ", c.violations(), ",\n    \"blind\": [",
      absl::StrJoin(r.blind, ", ",
                    [](std::string* out, const std::string& why) {
                      absl::StrAppend(out, "\"", why, "\"");
                    }),
      "]\n  }\n}\n");
}

int RunChaosCommand(const ChaosOptions& options, const std::string& work_dir,
                    const std::string& pg_dsn, const std::string& json) {
  std::string dir = absl::StrCat(work_dir, "/fgchaos-XXXXXX");
  if (::mkdtemp(dir.data()) == nullptr) {
    std::fprintf(stderr, "fencegate-bench: cannot create a directory in %s\n",
                 work_dir.c_str());
    return 1;
  }
  EnvironmentOptions eopts;
  eopts.pg_dsn = pg_dsn;
  eopts.work_dir = dir;
  eopts.start_gateway = false;
  std::fprintf(stderr, "fencegate-bench: chaos: starting servers in %s\n",
               dir.c_str());
  absl::StatusOr<std::unique_ptr<Environment>> env = Environment::Start(eopts);
  if (!env.ok()) {
    std::fprintf(stderr, "fencegate-bench: %s\n",
                 std::string(env.status().message()).c_str());
    return 1;
  }
  if (pg_dsn.empty() == false) {
    std::fprintf(stderr,
                 "fencegate-bench: chaos: an existing PostgreSQL is not "
                 "restarted\n");
  }
  absl::StatusOr<ChaosResult> result = RunChaos(**env, options);
  env->reset();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (!result.ok()) {
    std::fprintf(stderr, "fencegate-bench: chaos: %s\n",
                 result.status().ToString().c_str());
    return 1;
  }
  PrintChaos(*result);
  if (!json.empty()) std::ofstream(json) << ChaosJson(*result);
  return result->counts.violations() == 0 && result->blind.empty() ? 0 : 1;
}

}  // namespace fencegate::bench
