// Copyright fencegate authors.

#include "bench/throughput.h"

#include <fcntl.h>
#include <libpq-fe.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "fencegate/client/tls.h"
#include "fencegate/v1/gateway.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "postgres/fence_schema.h"
#include "pqxx/pqxx"

namespace fencegate::bench {
namespace {

// The variant gateway a target runs against ("mtls" for gateway-pg-mtls,
// "metrics" for gateway-noop-metrics); empty for the first gateway.
std::string VariantOf(absl::string_view target) {
  for (absl::string_view variant : {"mtls", "metrics"}) {
    if (absl::EndsWith(target, absl::StrCat("-", variant))) {
      return std::string(variant);
    }
  }
  return "";
}

// The seed's fenced UPDATE: the row's own fence column guards it.
constexpr char kFencedUpdate[] =
    "UPDATE bench_accounts SET balance = balance + 1, fence = $2 "
    "WHERE id = $1 AND fence <= $2";

// The fence table of the direct-fenced clients; the gateway's adapter uses
// its own default table in the same database.

// One client's connection to one target. A client makes one fenced write
// at a time: with Write() on a thread of its own (libpqxx blocks), or with
// WriteAsync() when async() is true (gRPC's callback API, so the harness's
// 64 clients do not need 64 threads of the two cores the gateway uses).
class Client {
 public:
  virtual ~Client() = default;
  virtual bool async() const { return false; }
  virtual absl::Status Write(uint64_t token) = 0;
  // Starts a write; `done` runs on a gRPC thread when it finishes and may
  // start the next one.
  virtual void WriteAsync(uint64_t token,
                          std::function<void(absl::Status)> done) {
    done(Write(token));
  }
};

// The fenced UPDATE of row `id` at `token`, in autocommit; libpqxx's
// exceptions pass through.
absl::Status FencedUpdate(pqxx::nontransaction& tx, int id, uint64_t token) {
  pqxx::result r =
      tx.exec_params(kFencedUpdate, id, static_cast<int64_t>(token));
  if (r.affected_rows() != 1) {
    return absl::FailedPreconditionError("fenced update matched no row");
  }
  return absl::OkStatus();
}

// `direct`'s client: the fenced UPDATE with libpqxx, on its own connection.
class DirectClient : public Client {
 public:
  DirectClient(const std::string& dsn, int id) : conn_(dsn), id_(id) {}
  absl::Status Write(uint64_t token) override {
    try {
      pqxx::nontransaction tx(conn_);
      return FencedUpdate(tx, id_, token);
    } catch (const std::exception& e) {
      return absl::UnavailableError(e.what());
    }
  }

 private:
  pqxx::connection conn_;
  const int id_;
};

// `gateway-pgwire`'s: direct's UPDATE through the gateway's PostgreSQL port
// (docs/pgwire.md), in a session fenced with the write's token, set when
// the session starts. A new token is set with SET fencegate.token, which
// moves the session's hold (a release, this gateway's check, a raise of
// the database's fence and a hold: round trips to PostgreSQL, before the
// write).
class PgwireClient : public Client {
 public:
  PgwireClient(std::function<std::string(uint64_t)> dsn, int id)
      : dsn_(std::move(dsn)), id_(id) {}
  absl::Status Write(uint64_t token) override {
    try {
      if (conn_ == nullptr) {
        conn_ = std::make_unique<pqxx::connection>(dsn_(token));
        token_ = token;
      }
      pqxx::nontransaction tx(*conn_);
      if (token != token_) {
        tx.exec0(absl::StrCat("SET fencegate.token = ", token));
        token_ = token;
      }
      return FencedUpdate(tx, id_, token);
    } catch (const std::exception& e) {
      conn_.reset();
      return absl::UnavailableError(e.what());
    }
  }

 private:
  const std::function<std::string(uint64_t)> dsn_;
  const int id_;
  std::unique_ptr<pqxx::connection> conn_;
  uint64_t token_ = 0;
};

// What the file adapter does for a 64-byte put, without the gateway: a
// temporary file written and fsynced, renamed over the target, and the
// directory fsynced, in a directory of its own on the file route's file
// system. The machine's floor under gateway-file.
class FileDirectClient : public Client {
 public:
  FileDirectClient(const std::string& dir, int id)
      : dir_(absl::StrCat(dir, "/", id)) {
    std::error_code ignored;
    std::filesystem::create_directories(dir_, ignored);
  }
  absl::Status Write(uint64_t token) override {
    const std::string temp = absl::StrCat(dir_, "/.tmp");
    const std::string target = absl::StrCat(dir_, "/data");
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return absl::UnavailableError(std::strerror(errno));
    const std::string data(64, static_cast<char>('a' + token % 26));
    const bool written = ::write(fd, data.data(), data.size()) ==
                             static_cast<ssize_t>(data.size()) &&
                         ::fsync(fd) == 0;
    ::close(fd);
    if (!written || ::rename(temp.c_str(), target.c_str()) != 0) {
      return absl::UnavailableError(std::strerror(errno));
    }
    const int dir = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY);
    if (dir < 0) return absl::UnavailableError(std::strerror(errno));
    const bool synced = ::fsync(dir) == 0;
    ::close(dir);
    return synced ? absl::OkStatus()
                  : absl::UnavailableError(std::strerror(errno));
  }

 private:
  const std::string dir_;
};

// A direct writer following fencegate's protocol (docs/postgres.md): the
// fence function's call and the fenced UPDATE as one pipelined implicit
// transaction (libpq pipeline mode). PostgreSQL's own cost of fencing in the
// database; gateway-pg, which also resets the session before each Write,
// can be no faster.
class DirectFencedClient : public Client {
 public:
  DirectFencedClient(const std::string& dsn, int id)
      : conn_(PQconnectdb(dsn.c_str())),
        id_(absl::StrCat(id)),
        domain_(absl::StrCat("bench-direct-fenced-", id)) {
    if (PQstatus(conn_) != CONNECTION_OK) return;
    PGresult* r =
        PQprepare(conn_, "fence",
                  postgres::FenceCallSql(postgres::kDefaultFenceSchema).c_str(),
                  2, nullptr);
    PQclear(r);
  }
  ~DirectFencedClient() override { PQfinish(conn_); }

  absl::Status Write(uint64_t token) override {
    const std::string t = absl::StrCat(token);
    const char* fence[2] = {domain_.c_str(), t.c_str()};
    const char* update[2] = {id_.c_str(), t.c_str()};
    if (PQenterPipelineMode(conn_) != 1 ||
        PQsendQueryPrepared(conn_, "fence", 2, fence, nullptr, nullptr, 0) !=
            1 ||
        PQsendQueryParams(conn_, kFencedUpdate, 2, nullptr, update, nullptr,
                          nullptr, 0) != 1 ||
        PQpipelineSync(conn_) != 1) {
      return absl::UnavailableError(PQerrorMessage(conn_));
    }
    absl::Status status;
    for (int q = 0; q < 2; ++q) {
      PGresult* r = PQgetResult(conn_);
      if (r == nullptr) return absl::UnavailableError(PQerrorMessage(conn_));
      const ExecStatusType want = q == 0 ? PGRES_TUPLES_OK : PGRES_COMMAND_OK;
      if (PQresultStatus(r) != want && status.ok()) {
        status = absl::FailedPreconditionError(PQresultErrorMessage(r));
      } else if (q == 1 && status.ok() && std::string(PQcmdTuples(r)) != "1") {
        status = absl::FailedPreconditionError("fenced update matched no row");
      }
      PQclear(r);
      PQclear(PQgetResult(conn_));  // The NULL that ends query q.
    }
    PGresult* sync = PQgetResult(conn_);
    const bool synced =
        sync != nullptr && PQresultStatus(sync) == PGRES_PIPELINE_SYNC;
    PQclear(sync);
    if (!synced || PQexitPipelineMode(conn_) != 1) {
      return absl::UnavailableError(PQerrorMessage(conn_));
    }
    return status;
  }

 private:
  PGconn* const conn_;
  const std::string id_;
  const std::string domain_;
};

class GatewayClient : public Client {
 public:
  // `with_seq`: each write carries the next seq of the client's own
  // counter (1, 2, ...: a new token may start anywhere, gaps are allowed).
  GatewayClient(std::shared_ptr<grpc::Channel> channel, std::string kind,
                std::string domain, int id, bool with_seq)
      : stub_(v1::Gateway::NewStub(channel)), with_seq_(with_seq) {
    request_.set_domain(std::move(domain));
    v1::Operation* op = request_.add_ops();
    if (kind == "gateway-pg") {
      request_.set_resource("db/bench_accounts");
      op->mutable_sql()->set_sql(kFencedUpdate);
      op->mutable_sql()->add_params()->set_int64(id);
      op->mutable_sql()->add_params()->set_int64(0);  // Token, per write.
    } else if (kind == "gateway-file") {
      request_.set_resource(absl::StrCat("files/bench/", id));
      op->mutable_put()->set_data(std::string(64, 'x'));
    } else {
      request_.set_resource(absl::StrCat("noop/bench/", id));
      op->mutable_put()->set_data(std::string(64, 'x'));
    }
  }
  bool async() const override { return true; }

  absl::Status Write(uint64_t token) override {
    SetToken(token);
    v1::WriteResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(30));
    return ToStatus(stub_->Write(&context, request_, &response));
  }

  void WriteAsync(uint64_t token,
                  std::function<void(absl::Status)> done) override {
    SetToken(token);
    context_ = std::make_unique<grpc::ClientContext>();
    context_->set_deadline(std::chrono::system_clock::now() +
                           std::chrono::seconds(30));
    response_.Clear();
    stub_->async()->Write(
        context_.get(), &request_, &response_,
        [done = std::move(done)](grpc::Status s) { done(ToStatus(s)); });
  }

 private:
  void SetToken(uint64_t token) {
    request_.set_token(token);
    if (with_seq_) request_.set_seq(++seq_);
    if (request_.ops(0).has_sql()) {
      request_.mutable_ops(0)->mutable_sql()->mutable_params(1)->set_int64(
          static_cast<int64_t>(token));
    }
  }
  static absl::Status ToStatus(const grpc::Status& s) {
    if (s.ok()) return absl::OkStatus();
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        s.error_message());
  }

  std::unique_ptr<v1::Gateway::Stub> stub_;
  const bool with_seq_;
  uint64_t seq_ = 0;
  v1::WriteRequest request_;
  // The write in flight (one at a time).
  std::unique_ptr<grpc::ClientContext> context_;
  v1::WriteResponse response_;
};

// The floor under every gateway figure: gRPC's health check, answered by
// gRPC itself on its own thread, over the same channels from the same
// client code. What gateway-noop adds to it is the gateway's own cost.
class HealthClient : public Client {
 public:
  explicit HealthClient(std::shared_ptr<grpc::Channel> channel)
      : stub_(grpc::health::v1::Health::NewStub(channel)) {}
  bool async() const override { return true; }
  absl::Status Write(uint64_t) override {
    grpc::health::v1::HealthCheckResponse response;
    grpc::ClientContext context;
    grpc::Status s = stub_->Check(&context, request_, &response);
    return s.ok() ? absl::OkStatus()
                  : absl::UnavailableError(s.error_message());
  }
  void WriteAsync(uint64_t, std::function<void(absl::Status)> done) override {
    context_ = std::make_unique<grpc::ClientContext>();
    stub_->async()->Check(
        context_.get(), &request_, &response_,
        [done = std::move(done)](grpc::Status s) {
          done(s.ok() ? absl::OkStatus()
                      : absl::UnavailableError(s.error_message()));
        });
  }

 private:
  std::unique_ptr<grpc::health::v1::Health::Stub> stub_;
  grpc::health::v1::HealthCheckRequest request_;
  std::unique_ptr<grpc::ClientContext> context_;
  grpc::health::v1::HealthCheckResponse response_;
};

absl::Status PrepareTable(const std::string& dsn, int rows) {
  try {
    pqxx::connection c(dsn);
    pqxx::work tx(c);
    tx.exec(
        "CREATE TABLE IF NOT EXISTS bench_accounts (id int PRIMARY KEY, "
        "fence bigint NOT NULL, balance bigint NOT NULL)");
    tx.exec_params(
        "INSERT INTO bench_accounts SELECT g, 0, 0 FROM generate_series(0, "
        "$1) g ON CONFLICT (id) DO NOTHING",
        rows);
    tx.commit();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return absl::UnavailableError(e.what());
  }
}

RunStats RunOne(const std::string& target, const std::string& pattern,
                int clients, int round, absl::Duration duration,
                const CpuMeter& meter,
                const std::function<std::unique_ptr<Client>(int)>& make) {
  RunStats stats;
  stats.target = target;
  stats.pattern = pattern;
  stats.clients = clients;
  stats.round = round;
  // Tokens start from the clock so that every run starts above the last.
  const uint64_t base = static_cast<uint64_t>(absl::ToUnixMicros(absl::Now()));
  std::atomic<uint64_t> ops{0}, errors{0};
  std::atomic<bool> stop{false};
  absl::Mutex mu;
  std::vector<std::thread> threads;
  std::vector<std::vector<uint32_t>> latencies(clients);
  std::vector<std::unique_ptr<Client>> conns;
  for (int i = 0; i < clients; ++i) conns.push_back(make(i));
  auto record = [&](int i, std::chrono::steady_clock::time_point t0,
                    const absl::Status& s) {
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                  std::chrono::steady_clock::now() - t0)
                  .count();
    if (s.ok()) {
      latencies[i].push_back(static_cast<uint32_t>(us));
      ops.fetch_add(1, std::memory_order_relaxed);
    } else {
      errors.fetch_add(1, std::memory_order_relaxed);
      absl::MutexLock lock(&mu);
      if (stats.first_error.empty()) stats.first_error = s.ToString();
    }
  };
  // Asynchronous clients: each completion records and starts the next write
  // until `stop`; `finished` counts the clients that stopped.
  int finished = 0;
  std::vector<uint64_t> tokens(clients, base);
  std::function<void(int)> issue = [&](int i) {
    auto t0 = std::chrono::steady_clock::now();
    conns[i]->WriteAsync(tokens[i], [&, i, t0](absl::Status s) {
      record(i, t0, s);
      if (pattern == "advancing") ++tokens[i];
      if (!stop.load(std::memory_order_relaxed)) {
        issue(i);
        return;
      }
      absl::MutexLock lock(&mu);
      ++finished;
    });
  };
  for (int i = 0; i < clients; ++i) latencies[i].reserve(1 << 16);
  // One untimed write per client first: gRPC channels and the gateway's
  // pool connections open on first use, and their set-up (a connect, a
  // PostgreSQL fork) is not what a run measures.
  for (int i = 0; i < clients; ++i) {
    if (absl::Status s = conns[i]->Write(base); !s.ok()) {
      errors.fetch_add(1, std::memory_order_relaxed);
      if (stats.first_error.empty()) stats.first_error = s.ToString();
    }
  }
  const CpuTimes cpu_start = meter.Sample();
  const absl::Time start = absl::Now();
  for (int i = 0; i < clients; ++i) {
    if (conns[i]->async()) {
      issue(i);
      continue;
    }
    threads.emplace_back([&, i] {
      uint64_t token = base;
      while (!stop.load(std::memory_order_relaxed)) {
        auto t0 = std::chrono::steady_clock::now();
        absl::Status s = conns[i]->Write(token);
        record(i, t0, s);
        if (pattern == "advancing") ++token;
      }
      absl::MutexLock lock(&mu);
      ++finished;
    });
  }
  // Live progress line.
  uint64_t last_ops = 0;
  absl::Time last = start;
  while (absl::Now() - start < duration) {
    absl::SleepFor(
        std::min(absl::Seconds(1), duration - (absl::Now() - start)));
    const absl::Time now = absl::Now();
    const uint64_t o = ops.load();
    std::fprintf(
        stderr,
        "\r  %-17s %-9s N=%-3d r%-2d %9.0f ops/s  errors=%-6llu %4.1f/%.0fs ",
        target.c_str(), pattern.c_str(), clients, round + 1,
        (o - last_ops) / absl::ToDoubleSeconds(now - last),
        static_cast<unsigned long long>(errors.load()),
        absl::ToDoubleSeconds(now - start), absl::ToDoubleSeconds(duration));
    last_ops = o;
    last = now;
  }
  stop = true;
  {
    absl::MutexLock lock(&mu);
    auto all_finished = [&] { return finished == clients; };
    mu.Await(absl::Condition(&all_finished));
  }
  for (auto& t : threads) t.join();
  stats.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  stats.cpu = meter.Sample() - cpu_start;
  std::fprintf(stderr, "\n");
  stats.ops = ops.load();
  stats.errors = errors.load();
  for (auto& l : latencies) {
    stats.latencies_us.insert(stats.latencies_us.end(), l.begin(), l.end());
  }
  stats.Finish();
  return stats;
}

}  // namespace

absl::StatusOr<std::vector<RunStats>> RunThroughput(
    Environment& env, const ThroughputOptions& options) {
  int max_clients = 0;
  for (int c : options.clients) max_clients = std::max(max_clients, c);
  if (absl::Status s = PrepareTable(env.pg_dsn(), max_clients); !s.ok()) {
    return s;
  }
  using Make = std::function<std::unique_ptr<Client>(int)>;
  std::vector<std::pair<std::string, Make>> makers;
  for (const std::string& target : options.targets) {
    Make make;
    if (target == "direct") {
      make = [&](int i) {
        return std::make_unique<DirectClient>(env.pg_dsn(), i);
      };
    } else if (target == "direct-fenced") {
      make = [&](int i) {
        return std::make_unique<DirectFencedClient>(env.pg_dsn(), i);
      };
    } else if (target == "gateway-pgwire") {
      // direct's UPDATE, through the gateway's PostgreSQL port: each
      // session fences a domain of its own.
      if (env.gateway_address().empty()) {
        return absl::FailedPreconditionError("the gateway is not running");
      }
      make = [&](int i) {
        return std::make_unique<PgwireClient>(
            [&env, domain = absl::StrCat("bench-gateway-pgwire-", i)](
                uint64_t token) { return env.pgwire_dsn(domain, token); },
            i);
      };
    } else if (target == "file-direct") {
      make = [&](int i) {
        return std::make_unique<FileDirectClient>(
            absl::StrCat(env.data_dir(), "/file-direct"), i);
      };
    } else if (target == "pgbouncer") {
      if (env.pgbouncer_dsn().empty()) {
        std::fprintf(stderr, "  pgbouncer: not available, skipped\n");
        continue;
      }
      make = [&](int i) {
        return std::make_unique<DirectClient>(env.pgbouncer_dsn(), i);
      };
    } else if (target == "gateway-pg" || target == "gateway-file" ||
               target == "gateway-pg-seq" || target == "gateway-file-seq" ||
               target == "gateway-noop" || target == "grpc-floor" ||
               target == "gateway-pg-mtls" || target == "gateway-noop-mtls" ||
               target == "gateway-pg-metrics" ||
               target == "gateway-noop-metrics") {
      const std::string variant = VariantOf(target);
      const bool mtls = variant == "mtls";
      const std::string address = variant.empty()
                                      ? env.gateway_address()
                                      : env.variant_address(variant);
      if (address.empty()) {
        return absl::FailedPreconditionError(
            absl::StrCat("the ", variant, " gateway is not running"));
      }
      absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
          client::ChannelCredentials(mtls ? env.mtls_client()
                                          : client::TlsFiles{});
      if (!credentials.ok()) return credentials.status();
      make = [target, address, variant,
              credentials = *credentials](int i) -> std::unique_ptr<Client> {
        // One channel per 8 clients: gRPC multiplexes, but one HTTP/2
        // connection would serialize its frames on one thread.
        grpc::ChannelArguments args;
        args.SetInt("grpc.channel_id", i / 8);  // Distinct subchannels.
        auto ch = grpc::CreateCustomChannel(address, credentials, args);
        if (target == "grpc-floor") return std::make_unique<HealthClient>(ch);
        const bool with_seq = absl::EndsWith(target, "-seq");
        const std::string kind(absl::StripSuffix(
            absl::StripSuffix(target, absl::StrCat("-", variant)), "-seq"));
        return std::make_unique<GatewayClient>(
            ch, kind, absl::StrCat("bench-", target, "-", i), i, with_seq);
      };
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--targets: unknown target \"", target, "\""));
    }
    makers.emplace_back(target, std::move(make));
  }
  // All runs of one client count follow one another, target by target and
  // pattern by pattern, round after round: the machine's speed drifts over
  // minutes (other tenants, CPU credit), and ratios of runs made close
  // together -- a target against direct, advancing against steady, in the
  // same round -- are the ones to trust.
  std::map<std::string, CpuMeter> meters;
  for (const auto& [target, make] : makers) {
    meters.try_emplace(VariantOf(target), env.cpu_meter(VariantOf(target)));
  }
  std::vector<RunStats> runs;
  for (int clients : options.clients) {
    for (int round = 0; round < options.rounds; ++round) {
      for (const auto& [target, make] : makers) {
        for (const std::string& pattern : options.patterns) {
          // A health check carries no token.
          if (target == "grpc-floor" && pattern != "steady") continue;
          runs.push_back(RunOne(target, pattern, clients, round,
                                options.duration, meters.at(VariantOf(target)),
                                make));
          if (options.thread_switches) {
            std::fprintf(stderr, "  gateway switches/write by thread:%s\n",
                         runs.back().ThreadSwitchesLine().c_str());
          }
        }
      }
    }
  }
  // Reported grouped by target, as listed.
  auto rank = [&](const RunStats& r) {
    auto index = [](const auto& list, const auto& value) {
      return std::find(list.begin(), list.end(), value) - list.begin();
    };
    return std::make_tuple(index(options.targets, r.target),
                           index(options.patterns, r.pattern),
                           index(options.clients, r.clients), r.round);
  };
  std::stable_sort(
      runs.begin(), runs.end(),
      [&](const RunStats& a, const RunStats& b) { return rank(a) < rank(b); });
  return runs;
}

}  // namespace fencegate::bench
