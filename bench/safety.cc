// Copyright fencegate authors.

#include "bench/safety.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/token_sources.h"
#include "fencegate/common/flag_args.h"
#include "fencegate/v1/gateway.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "pqxx/pqxx"

namespace fencegate::bench {
namespace {

constexpr char kInsert[] =
    "INSERT INTO safety_history (run, token, worker, write_id) "
    "VALUES ($1, $2, $3, $4)";

struct WorkerConfig {
  SourceFlags src;
  std::string mode, lock, run, log_path, out;
  uint64_t id = 0, ttl_ms = 300, pause_ttls = 4, writes = 4, until_ms = 0;
  std::string pause_fraction = "0.5";
};

class Worker {
 public:
  explicit Worker(const WorkerConfig& c) : c_(c), rng_(c.id * 7919 + 1) {
    gateway_ = v1::Gateway::NewStub(
        grpc::CreateChannel(c.src.gateway, grpc::InsecureChannelCredentials()));
    if (c.mode == "direct")
      conn_ = std::make_unique<pqxx::connection>(c.src.pg_dsn);
    (void)absl::SimpleAtod(c.pause_fraction, &pause_fraction_);
  }

  absl::Status Run() {
    absl::StatusOr<std::unique_ptr<client::TokenSource>> made =
        MakeTokenSource(c_.src, "/fencegate-safety");
    if (!made.ok()) return made.status();
    std::unique_ptr<client::TokenSource> source = *std::move(made);
    client::LockOptions lock_options;
    lock_options.ttl = absl::Milliseconds(c_.ttl_ms);
    lock_options.wait = absl::Seconds(2);
    lock_options.owner = absl::StrCat("worker-", c_.id);
    const absl::Time until =
        absl::FromUnixMillis(static_cast<int64_t>(c_.until_ms));
    int64_t counter = 0;
    while (absl::Now() < until) {
      absl::StatusOr<std::unique_ptr<client::HeldLock>> lock =
          source->Acquire(c_.lock, lock_options, nullptr);
      if (!lock.ok()) continue;
      ++holdings_;
      const bool pause =
          std::uniform_real_distribution<double>(0, 1)(rng_) < pause_fraction_;
      for (uint64_t k = 0; k < c_.writes; ++k) {
        // A worker checks its lock before each write...
        if ((*lock)->lost()) break;
        // ...and a pause can strike right after the check.
        if (pause && k == c_.writes / 2) {
          ++pauses_;
          PauseWholeProcess(lock_options.ttl *
                            static_cast<int64_t>(c_.pause_ttls));
        }
        WriteBoth((*lock)->token(),
                  static_cast<int64_t>(c_.id) * 100000000 + ++counter);
      }
      (void)(*lock)->Release();  // Refused when lost: fine.
    }
    std::ofstream out(c_.out);
    out << attempted_ << " " << acked_ << " " << refused_ << " " << errors_
        << " " << holdings_ << " " << pauses_ << "\n"
        << acks_;
    return out ? absl::OkStatus()
               : absl::InternalError("cannot write " + c_.out);
  }

 private:
  void WriteBoth(uint64_t token, int64_t write_id) {
    std::string line = absl::StrCat(token, " ", c_.id, " ", write_id, "\n");
    attempted_ += 2;
    absl::Status pg, file;
    if (c_.mode == "gateway") {
      v1::WriteRequest request;
      request.set_domain(c_.lock);
      request.set_token(token);
      request.set_resource("db/safety_history");
      v1::SqlStatement* sql = request.add_ops()->mutable_sql();
      sql->set_sql(kInsert);
      sql->add_params()->set_text(c_.run);
      sql->add_params()->set_int64(static_cast<int64_t>(token));
      sql->add_params()->set_int64(static_cast<int64_t>(c_.id));
      sql->add_params()->set_int64(write_id);
      pg = Send(request);
      v1::WriteRequest append;
      append.set_domain(c_.lock);
      append.set_token(token);
      append.set_resource(absl::StrCat("files/", c_.run, ".log"));
      append.add_ops()->mutable_append()->set_data(line);
      file = Send(append);
    } else {
      try {
        pqxx::nontransaction tx(*conn_);
        tx.exec_params(kInsert, c_.run, static_cast<int64_t>(token),
                       static_cast<int64_t>(c_.id), write_id);
        pg = absl::OkStatus();
      } catch (const std::exception& e) {
        pg = absl::UnavailableError(e.what());
      }
      const int fd =
          ::open(c_.log_path.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
      const bool ok = fd >= 0 &&
                      ::write(fd, line.data(), line.size()) ==
                          static_cast<ssize_t>(line.size()) &&
                      ::fsync(fd) == 0;
      if (fd >= 0) ::close(fd);
      file = ok ? absl::OkStatus() : absl::UnavailableError("append failed");
    }
    Account(pg, "pg", write_id);
    Account(file, "file", write_id);
  }

  absl::Status Send(const v1::WriteRequest& request) {
    v1::WriteResponse response;
    grpc::ClientContext context;
    grpc::Status s = gateway_->Write(&context, request, &response);
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        s.error_message());
  }

  void Account(const absl::Status& s, const char* where, int64_t write_id) {
    if (s.ok()) {
      ++acked_;
      absl::StrAppend(&acks_, where, " ", write_id, "\n");
    } else if (absl::IsFailedPrecondition(s)) {
      ++refused_;
    } else {
      ++errors_;
    }
  }

  const WorkerConfig c_;
  std::mt19937 rng_;
  double pause_fraction_ = 0.5;
  std::unique_ptr<v1::Gateway::Stub> gateway_;
  std::unique_ptr<pqxx::connection> conn_;
  uint64_t attempted_ = 0, acked_ = 0, refused_ = 0, errors_ = 0, holdings_ = 0,
           pauses_ = 0;
  std::string acks_;
};

// Counts writes applied below the highest token already applied, walking a
// history in application order; and acknowledged writes that are missing.
struct History {
  std::vector<std::pair<uint64_t, int64_t>> entries;  // (token, write_id)
  void Check(const absl::flat_hash_set<int64_t>& acked, uint64_t* violations,
             uint64_t* missing) const {
    uint64_t highest = 0;
    absl::flat_hash_set<int64_t> present;
    for (const auto& [token, write_id] : entries) {
      if (token < highest) ++*violations;
      highest = std::max(highest, token);
      present.insert(write_id);
    }
    for (int64_t id : acked) {
      if (!present.contains(id)) ++*missing;
    }
  }
};

}  // namespace

// Stops this whole process — every thread, keep-alive included — for `d`,
// the way a stop-the-world GC pause or a SIGSTOP'd VM would: a child
// process sends SIGCONT when the time is up.
void PauseWholeProcess(absl::Duration d) {
  const pid_t self = ::getpid();
  const pid_t resumer = ::fork();
  if (resumer == 0) {
    ::usleep(static_cast<useconds_t>(absl::ToInt64Microseconds(d)));
    ::kill(self, SIGCONT);
    ::_exit(0);
  }
  ::kill(self, SIGSTOP);
  ::waitpid(resumer, nullptr, 0);
}

int SafetyWorkerMain(int argc, char** argv) {
  WorkerConfig c;
  CLI::App app("a safety worker of fencegate-bench", "safety-worker");
  AddSourceFlags(app, &c.src);
  app.add_option("--mode", c.mode, "gateway or direct");
  app.add_option("--lock", c.lock, "lock name (and fencing domain)");
  app.add_option("--run", c.run, "run id");
  app.add_option("--log_path", c.log_path, "direct mode: the file");
  app.add_option("--out", c.out, "where to write the worker's results");
  app.add_option("--id", c.id, "worker id");
  app.add_option("--ttl_ms", c.ttl_ms, "lease ttl");
  app.add_option("--pause_ttls", c.pause_ttls, "pause length in ttls");
  app.add_option("--pause_fraction", c.pause_fraction,
                 "share of paused holdings");
  app.add_option("--writes", c.writes, "writes per holding");
  app.add_option("--until_ms", c.until_ms,
                 "stop taking the lock after (unix ms)");
  if (std::optional<int> exit = ParseFlags(app, argc - 1, argv + 1))
    return *exit;
  absl::Status s = Worker(c).Run();
  if (!s.ok()) {
    std::fprintf(stderr, "safety-worker %llu: %s\n",
                 static_cast<unsigned long long>(c.id), s.ToString().c_str());
    return 1;
  }
  return 0;
}

absl::StatusOr<SafetyResult> RunSafety(Environment& env,
                                       const SafetyOptions& options,
                                       bool fenced) {
  SafetyResult result;
  result.source = options.source;
  result.mode = fenced ? "gateway" : "direct";
  const std::string run =
      absl::StrCat("safety-", options.source, "-", result.mode, "-",
                   absl::ToUnixMicros(absl::Now()));
  const std::string log_path =
      fenced ? absl::StrCat(env.data_dir(), "/files/", run, ".log")
             : absl::StrCat(env.data_dir(), "/", run, ".log");
  if (absl::Status s = env.Exec(
          "CREATE TABLE IF NOT EXISTS safety_history (seq bigserial PRIMARY "
          "KEY, run text, token bigint, worker int, write_id bigint)");
      !s.ok()) {
    return s;
  }

  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return absl::InternalError("cannot find /proc/self/exe");
  self[n] = '\0';
  const int64_t until = absl::ToUnixMillis(absl::Now() + options.duration);
  std::vector<pid_t> pids;
  for (int i = 0; i < options.workers; ++i) {
    std::vector<std::string> argv = {
        self,
        "safety-worker",
        "--mode=" + result.mode,
        "--lock=" + run,
        "--run=" + run,
        "--log_path=" + log_path,
        absl::StrCat("--out=", env.data_dir(), "/", run, "-", i, ".txt"),
        absl::StrCat("--id=", i),
        absl::StrCat("--ttl_ms=", absl::ToInt64Milliseconds(options.ttl)),
        absl::StrCat("--pause_ttls=", options.pause_ttls),
        absl::StrCat("--pause_fraction=", options.pause_fraction),
        absl::StrCat("--writes=", options.writes_per_holding),
        absl::StrCat("--until_ms=", until)};
    for (std::string& a :
         SourceArgs(env.source_flags(options.source, env.gateway_address()))) {
      argv.push_back(std::move(a));
    }
    const pid_t pid = ::fork();
    if (pid < 0) return absl::InternalError("fork failed");
    if (pid == 0) {
      std::vector<char*> args;
      for (std::string& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      ::execv(self, args.data());
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  bool workers_ok = true;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    workers_ok = workers_ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  if (!workers_ok) return absl::InternalError("a safety worker failed");

  absl::flat_hash_set<int64_t> acked_pg, acked_file;
  for (int i = 0; i < options.workers; ++i) {
    std::ifstream in(absl::StrCat(env.data_dir(), "/", run, "-", i, ".txt"));
    uint64_t v[6] = {0};
    for (uint64_t& x : v) in >> x;
    result.attempted += v[0];
    result.acknowledged += v[1];
    result.refused_stale += v[2];
    result.errors += v[3];
    result.holdings += v[4];
    result.pauses += v[5];
    std::string where;
    int64_t id;
    while (in >> where >> id)
      (where == "pg" ? acked_pg : acked_file).insert(id);
  }

  History pg;
  try {
    pqxx::connection c(env.pg_dsn());
    pqxx::work tx(c);
    for (const pqxx::row& row : tx.exec_params(
             "SELECT token, write_id FROM safety_history WHERE run = $1 "
             "ORDER BY seq",
             run)) {
      pg.entries.emplace_back(row[0].as<int64_t>(), row[1].as<int64_t>());
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(e.what());
  }
  History file;
  absl::StatusOr<std::string> text = testing::ReadFile(log_path);
  if (text.ok()) {
    for (absl::string_view line :
         absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
      std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
      uint64_t token = 0;
      int64_t id = 0;
      if (f.size() == 3 && absl::SimpleAtoi(f[0], &token) &&
          absl::SimpleAtoi(f[2], &id)) {
        file.entries.emplace_back(token, id);
      }
    }
  }
  result.pg_rows = pg.entries.size();
  result.file_lines = file.entries.size();
  pg.Check(acked_pg, &result.pg_violations, &result.pg_missing);
  file.Check(acked_file, &result.file_violations, &result.file_missing);
  return result;
}

}  // namespace fencegate::bench
