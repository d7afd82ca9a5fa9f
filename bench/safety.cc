// Copyright fencegate authors.

#include "bench/safety.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "fencegate/v1/gateway.grpc.pb.h"
#include "fencegate/v1/lease.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "pqxx/pqxx"

namespace fencegate::bench {
namespace {

constexpr char kInsert[] =
    "INSERT INTO safety_history (mode, token, worker, write_id) "
    "VALUES ($1, $2, $3, $4)";

struct Shared {
  absl::Mutex mu;
  absl::flat_hash_set<int64_t> acked_pg ABSL_GUARDED_BY(mu);
  absl::flat_hash_set<int64_t> acked_file ABSL_GUARDED_BY(mu);
  std::atomic<uint64_t> attempted{0}, acknowledged{0}, refused{0}, errors{0},
      holdings{0}, pauses{0};
};

class Worker {
 public:
  Worker(Environment& env, const SafetyOptions& options, bool fenced, int id,
         const std::string& lock, const std::string& log_path, Shared* shared)
      : options_(options),
        fenced_(fenced),
        id_(id),
        lock_(lock),
        log_path_(log_path),
        shared_(shared),
        rng_(id * 7919 + 1) {
    auto channel = grpc::CreateChannel(env.gateway_address(),
                                       grpc::InsecureChannelCredentials());
    lease_ = v1::Lease::NewStub(channel);
    gateway_ = v1::Gateway::NewStub(channel);
    if (!fenced_) conn_ = std::make_unique<pqxx::connection>(env.pg_dsn());
    mode_ = fenced ? "gateway" : "direct";
  }

  void Run(absl::Time end) {
    int64_t counter = 0;
    while (absl::Now() < end) {
      std::string lease_id;
      uint64_t token = 0;
      if (!Acquire(&lease_id, &token)) continue;
      ++shared_->holdings;
      const bool pause = std::uniform_real_distribution<double>(0, 1)(rng_) <
                         options_.pause_fraction;
      for (int k = 0; k < options_.writes_per_holding; ++k) {
        // A worker checks its lease before each write...
        if (!KeepAlive(lease_id)) break;
        // ...and a pause can strike right after the check.
        if (pause && k == options_.writes_per_holding / 2) {
          ++shared_->pauses;
          absl::SleepFor(options_.ttl * options_.pause_ttls);
        }
        const int64_t write_id =
            static_cast<int64_t>(id_) * 100000000 + ++counter;
        WriteBoth(token, write_id);
      }
      Release(lease_id);
    }
  }

 private:
  bool Acquire(std::string* lease_id, uint64_t* token) {
    v1::AcquireRequest request;
    request.set_name(lock_);
    request.set_ttl_ms(
        static_cast<uint32_t>(absl::ToInt64Milliseconds(options_.ttl)));
    request.set_wait_ms(2000);
    request.set_owner(absl::StrCat("worker-", id_));
    v1::AcquireResponse response;
    grpc::ClientContext context;
    if (!lease_->Acquire(&context, request, &response).ok() ||
        !response.acquired()) {
      return false;
    }
    *lease_id = response.lease_id();
    *token = response.token();
    return true;
  }
  bool KeepAlive(const std::string& lease_id) {
    v1::KeepAliveRequest request;
    request.set_name(lock_);
    request.set_lease_id(lease_id);
    v1::KeepAliveResponse response;
    grpc::ClientContext context;
    return lease_->KeepAlive(&context, request, &response).ok();
  }
  void Release(const std::string& lease_id) {
    v1::ReleaseRequest request;
    request.set_name(lock_);
    request.set_lease_id(lease_id);
    v1::ReleaseResponse response;
    grpc::ClientContext context;
    (void)lease_->Release(&context, request, &response);  // Lost is fine.
  }

  void WriteBoth(uint64_t token, int64_t write_id) {
    std::string line = absl::StrCat(token, " ", id_, " ", write_id, "\n");
    shared_->attempted += 2;
    absl::Status pg, file;
    if (fenced_) {
      v1::WriteRequest request;
      request.set_domain(lock_);
      request.set_token(token);
      request.set_resource("db/safety_history");
      v1::SqlStatement* sql = request.add_ops()->mutable_sql();
      sql->set_sql(kInsert);
      sql->add_params()->set_text(mode_);
      sql->add_params()->set_int64(static_cast<int64_t>(token));
      sql->add_params()->set_int64(id_);
      sql->add_params()->set_int64(write_id);
      pg = Send(request);
      v1::WriteRequest append;
      append.set_domain(lock_);
      append.set_token(token);
      append.set_resource("files/safety-gateway.log");
      append.add_ops()->mutable_append()->set_data(line);
      file = Send(append);
    } else {
      try {
        pqxx::nontransaction tx(*conn_);
        tx.exec_params(kInsert, mode_, static_cast<int64_t>(token), id_,
                       write_id);
        pg = absl::OkStatus();
      } catch (const std::exception& e) {
        pg = absl::UnavailableError(e.what());
      }
      int fd = ::open(log_path_.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
      file = fd >= 0 &&
                     ::write(fd, line.data(), line.size()) ==
                         static_cast<ssize_t>(line.size()) &&
                     ::fsync(fd) == 0
                 ? absl::OkStatus()
                 : absl::UnavailableError("append failed");
      if (fd >= 0) ::close(fd);
    }
    Account(pg, write_id, /*file=*/false);
    Account(file, write_id, /*file=*/true);
  }

  absl::Status Send(const v1::WriteRequest& request) {
    v1::WriteResponse response;
    grpc::ClientContext context;
    grpc::Status s = gateway_->Write(&context, request, &response);
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        s.error_message());
  }

  void Account(const absl::Status& s, int64_t write_id, bool file) {
    if (s.ok()) {
      ++shared_->acknowledged;
      absl::MutexLock lock(&shared_->mu);
      (file ? shared_->acked_file : shared_->acked_pg).insert(write_id);
    } else if (absl::IsFailedPrecondition(s)) {
      ++shared_->refused;
    } else {
      ++shared_->errors;
    }
  }

  const SafetyOptions options_;
  const bool fenced_;
  const int id_;
  const std::string lock_, log_path_;
  std::string mode_;
  Shared* const shared_;
  std::mt19937 rng_;
  std::unique_ptr<v1::Lease::Stub> lease_;
  std::unique_ptr<v1::Gateway::Stub> gateway_;
  std::unique_ptr<pqxx::connection> conn_;
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

absl::StatusOr<SafetyResult> RunSafety(Environment& env,
                                       const SafetyOptions& options,
                                       bool fenced) {
  SafetyResult result;
  result.mode = fenced ? "gateway" : "direct";
  const std::string lock = absl::StrCat("safety-", result.mode, "-",
                                        absl::ToUnixMicros(absl::Now()));
  const std::string log_path =
      fenced ? env.data_dir() + "/files/safety-gateway.log"
             : env.data_dir() + "/safety-direct.log";
  try {
    pqxx::connection c(env.pg_dsn());
    pqxx::work tx(c);
    tx.exec(
        "CREATE TABLE IF NOT EXISTS safety_history (seq bigserial PRIMARY "
        "KEY, mode text, token bigint, worker int, write_id bigint)");
    tx.exec_params("DELETE FROM safety_history WHERE mode = $1", result.mode);
    tx.commit();
  } catch (const std::exception& e) {
    return absl::UnavailableError(e.what());
  }
  ::unlink(log_path.c_str());

  Shared shared;
  std::vector<std::unique_ptr<Worker>> workers;
  for (int i = 0; i < options.workers; ++i) {
    workers.push_back(std::make_unique<Worker>(env, options, fenced, i, lock,
                                               log_path, &shared));
  }
  const absl::Time end = absl::Now() + options.duration;
  std::vector<std::thread> threads;
  for (auto& w : workers) threads.emplace_back([&w, end] { w->Run(end); });
  for (auto& t : threads) t.join();

  result.attempted = shared.attempted;
  result.acknowledged = shared.acknowledged;
  result.refused_stale = shared.refused;
  result.errors = shared.errors;
  result.holdings = shared.holdings;
  result.pauses = shared.pauses;

  History pg;
  try {
    pqxx::connection c(env.pg_dsn());
    pqxx::work tx(c);
    for (const pqxx::row& row : tx.exec_params(
             "SELECT token, write_id FROM safety_history WHERE mode = $1 "
             "ORDER BY seq",
             result.mode)) {
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
  absl::MutexLock lock_acked(&shared.mu);
  pg.Check(shared.acked_pg, &result.pg_violations, &result.pg_missing);
  file.Check(shared.acked_file, &result.file_violations, &result.file_missing);
  return result;
}

}  // namespace fencegate::bench
