// Copyright fencegate authors.
//
// One chaos worker process: takes its source's lock again and again, fences
// the new token on both gateways, and writes each record to PostgreSQL
// (through either gateway), to a file (through the first), and, with
// --pg_ports, to PostgreSQL again through either gateway's PostgreSQL port
// (libpq, the token in the session's startup options), recording every
// write's outcome and times, and every Fence both gateways acknowledged.
// Stops when the stop file appears.
//
// A write through the port has no seq: one whose outcome is unknown (the
// session or the connection lost, a server error) is recorded as an error,
// which the checker may find landed or not, but never stale.

#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bench/chaos.h"
#include "bench/safety.h"
#include "bench/token_sources.h"
#include "fencegate/client/write_retry.h"
#include "fencegate/common/flag_args.h"
#include "fencegate/v1/gateway.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "pqxx/pqxx"

namespace fencegate::bench {
namespace {

constexpr char kInsert[] =
    "INSERT INTO chaos_history (run, domain, token, write_id) "
    "VALUES ($1, $2, $3, $4)";

int64_t MonotonicMicros() {
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

struct ChaosWorkerConfig {
  SourceFlags src;  // src.gateway: the first gateway.
  std::string gateway_b, lock, run, out, stop_file;
  // What a write whose outcome is unknown (UNAVAILABLE, DEADLINE_EXCEEDED)
  // does: "seq" retries it with its (token, seq) (WriteWithRetry), "plain"
  // retries it without a seq, "none" gives up.
  std::string retry = "seq";
  // The gateways' PostgreSQL ports; none: no writes through a port.
  std::vector<int> pg_ports;
  uint64_t id = 0, ttl_ms = 500, writes = 4;
  std::string pause_fraction = "0.3";
};

class ChaosWorker {
 public:
  explicit ChaosWorker(const ChaosWorkerConfig& c)
      : c_(c), rng_(c.id * 7919 + 17) {
    for (const std::string& address : {c.src.gateway, c.gateway_b}) {
      gateways_.push_back(v1::Gateway::NewStub(
          grpc::CreateChannel(address, grpc::InsecureChannelCredentials())));
    }
    (void)absl::SimpleAtod(c.pause_fraction, &pause_fraction_);
  }

  absl::Status Run() {
    absl::StatusOr<std::unique_ptr<client::TokenSource>> made =
        MakeTokenSource(c_.src, "/fencegate-chaos");
    if (!made.ok()) return made.status();
    std::unique_ptr<client::TokenSource> source = *std::move(made);
    client::LockOptions lock_options;
    lock_options.ttl = absl::Milliseconds(c_.ttl_ms);
    lock_options.wait = absl::Seconds(1);
    lock_options.owner = absl::StrCat("chaos-", c_.src.source, "-", c_.id);
    while (!std::filesystem::exists(c_.stop_file)) {
      absl::StatusOr<std::unique_ptr<client::HeldLock>> lock =
          source->Acquire(c_.lock, lock_options, nullptr);
      if (!lock.ok()) {
        // The source or a gateway is down: a fault is running.
        absl::SleepFor(absl::Milliseconds(50));
        continue;
      }
      ++holdings_;
      const uint64_t token = (*lock)->token();
      FenceEverywhere(token);
      const bool pause =
          std::uniform_real_distribution<double>(0, 1)(rng_) < pause_fraction_;
      for (uint64_t k = 0; k < c_.writes; ++k) {
        if ((*lock)->lost()) break;  // Checked before each write...
        if (pause && k == c_.writes / 2) {
          ++pauses_;  // ...and a pause can strike right after the check.
          PauseWholeProcess(lock_options.ttl * 3);
        }
        const int64_t write_id =
            static_cast<int64_t>(c_.id) * 1000000000 + ++counter_;
        WritePg(token, write_id);
        WriteFile(token, write_id);
        if (!c_.pg_ports.empty()) {
          WritePgwire(token,
                      static_cast<int64_t>(c_.id) * 1000000000 + ++counter_);
        }
      }
      pgwire_.reset();           // The session of this holding's token ends.
      (void)(*lock)->Release();  // Refused when lost: fine.
    }
    std::ofstream out(c_.out);
    out << "H " << holdings_ << " " << pauses_ << " " << retried_ << " "
        << replayed_ << "\n"
        << records_;
    return out ? absl::OkStatus()
               : absl::InternalError("cannot write " + c_.out);
  }

 private:
  // Sends `r` (its seq set from `write_id` in "seq" mode), retrying as
  // c_.retry says; counts the writes sent more than once, and those the
  // storage answered as replayed.
  absl::Status Call(v1::Gateway::Stub* gateway, v1::WriteRequest r,
                    int64_t write_id, int* sent) {
    client::WriteRetryOptions options;
    options.attempt_timeout = absl::Seconds(3);
    int attempts = 1;
    absl::StatusOr<v1::WriteResponse> response;
    if (c_.retry == "seq") {
      r.set_seq(static_cast<uint64_t>(write_id));
      response = client::WriteWithRetry(*gateway, r, options, &attempts);
    } else {
      // One attempt, or ("plain") the same loop without a seq.
      const int max = c_.retry == "plain" ? options.max_attempts : 1;
      for (attempts = 1;; ++attempts) {
        response = client::WriteWithRetry(*gateway, r, options);
        if (response.ok() || attempts >= max ||
            !client::IsOutcomeUnknown(response.status().code())) {
          break;
        }
        absl::SleepFor(options.initial_backoff);
      }
    }
    if (attempts > 1) ++retried_;
    if (response.ok() && response->replayed()) ++replayed_;
    *sent = attempts;
    return response.status();
  }

  // Fences `token` on every gateway, retrying one that is down for a while;
  // recorded only if all acknowledged it.
  void FenceEverywhere(uint64_t token) {
    int64_t acked_us = 0;
    for (auto& gateway : gateways_) {
      bool acked = false;
      for (int attempt = 0; attempt < 20 && !acked; ++attempt) {
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() +
                             std::chrono::seconds(3));
        v1::FenceRequest request;
        request.set_domain(c_.lock);
        request.set_token(token);
        v1::FenceState state;
        grpc::Status s = gateway->Fence(&context, request, &state);
        if (s.ok()) {
          acked = true;
        } else if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
          return;  // Already past this token: this holder is an old one.
        } else {
          absl::SleepFor(absl::Milliseconds(100));
        }
      }
      if (!acked) return;
      acked_us = MonotonicMicros();
    }
    records_ += FormatRecord(FenceRecord{c_.lock, token, acked_us});
  }

  void WritePg(uint64_t token, int64_t write_id) {
    v1::WriteRequest request;
    request.set_domain(c_.lock);
    request.set_token(token);
    request.set_resource("db/chaos_history");
    v1::SqlStatement* sql = request.add_ops()->mutable_sql();
    sql->set_sql(kInsert);
    sql->add_params()->set_text(c_.run);
    sql->add_params()->set_text(c_.lock);
    sql->add_params()->set_int64(static_cast<int64_t>(token));
    sql->add_params()->set_int64(write_id);
    v1::Gateway::Stub* gateway =
        gateways_[std::uniform_int_distribution<size_t>(0, 1)(rng_)].get();
    Record("pg", token, write_id,
           [&](int* sent) { return Call(gateway, request, write_id, sent); });
  }

  void WriteFile(uint64_t token, int64_t write_id) {
    v1::WriteRequest request;
    request.set_domain(c_.lock);
    request.set_token(token);
    request.set_resource(absl::StrCat("files/", c_.lock, ".log"));
    request.add_ops()->mutable_append()->set_data(
        absl::StrCat(token, " ", write_id, "\n"));
    Record("file", token, write_id, [&](int* sent) {
      return Call(gateways_[0].get(), request, write_id, sent);
    });
  }

  // The record through a port, in a session opened for this holding's
  // token (at its first write) on either gateway's port, in autocommit.
  void WritePgwire(uint64_t token, int64_t write_id) {
    Record("pg", token, write_id, [&](int* sent) {
      *sent = 1;
      try {
        if (pgwire_ == nullptr) {
          const int port = c_.pg_ports[std::uniform_int_distribution<size_t>(
              0, c_.pg_ports.size() - 1)(rng_)];
          pgwire_ = std::make_unique<pqxx::connection>(
              absl::StrCat("host=127.0.0.1 port=", port,
                           " dbname=db user=chaos connect_timeout=3 "
                           "options='-c fencegate.domain=",
                           c_.lock, " -c fencegate.token=", token, "'"));
        }
        pqxx::nontransaction tx(*pgwire_);
        tx.exec_params(kInsert, c_.run, c_.lock, static_cast<int64_t>(token),
                       write_id);
        return absl::OkStatus();
      } catch (const pqxx::sql_error& e) {
        pgwire_.reset();
        // The port's own check refused the transaction: nothing was sent.
        if (e.sqlstate() == "FG001") {
          return absl::FailedPreconditionError(e.what());
        }
        return absl::UnavailableError(e.what());
      } catch (const std::exception& e) {
        pgwire_.reset();
        return absl::UnavailableError(e.what());
      }
    });
  }

  template <typename Fn>
  void Record(const char* route, uint64_t token, int64_t write_id, Fn send) {
    WriteRecord w;
    w.route = route;
    w.domain = c_.lock;
    w.write_id = write_id;
    w.token = token;
    w.sent_us = MonotonicMicros();
    int sent = 1;
    const absl::Status s = send(&sent);
    w.answered_us = MonotonicMicros();
    // FAILED_PRECONDITION is the stale refusal here: the run has no policy
    // (so no token binding refuses) and its inserts violate no constraint.
    // Seqs only grow within a worker, so none is out of order. A retry
    // refused as stale says nothing of the attempt before it, whose outcome
    // was unknown: it may have been applied (before the fence moved), so
    // the write's outcome stays unknown.
    w.outcome = s.ok() ? WriteRecord::Outcome::kAcknowledged
                : s.code() == absl::StatusCode::kFailedPrecondition && sent == 1
                    ? WriteRecord::Outcome::kRefusedStale
                    : WriteRecord::Outcome::kError;
    records_ += FormatRecord(w);
  }

  const ChaosWorkerConfig c_;
  std::mt19937 rng_;
  double pause_fraction_ = 0.3;
  std::vector<std::unique_ptr<v1::Gateway::Stub>> gateways_;
  std::unique_ptr<pqxx::connection> pgwire_;
  uint64_t holdings_ = 0, pauses_ = 0, retried_ = 0, replayed_ = 0;
  int64_t counter_ = 0;
  std::string records_;
};

}  // namespace

int ChaosWorkerMain(int argc, char** argv) {
  ChaosWorkerConfig c;
  CLI::App app("a chaos worker of fencegate-bench", "chaos-worker");
  AddSourceFlags(app, &c.src);  // --gateway: the first (files, leases).
  app.add_option("--gateway_b", c.gateway_b, "second gateway");
  app.add_option("--lock", c.lock, "lock name (and fencing domain)");
  app.add_option("--run", c.run, "run id");
  app.add_option("--out", c.out, "where to write the records");
  app.add_option("--stop_file", c.stop_file, "stop once this file exists");
  app.add_option("--id", c.id, "worker id");
  app.add_option("--ttl_ms", c.ttl_ms, "lease ttl");
  app.add_option("--writes", c.writes, "writes per holding");
  app.add_option("--pause_fraction", c.pause_fraction,
                 "share of paused holdings");
  app.add_option("--pg_ports", c.pg_ports,
                 "the gateways' PostgreSQL ports (comma-separated)")
      ->delimiter(',');
  app.add_option("--retry", c.retry, "seq, plain or none")
      ->check(CLI::IsMember({"seq", "plain", "none"}));
  if (std::optional<int> exit = ParseFlags(app, argc - 1, argv + 1))
    return *exit;
  absl::Status s = ChaosWorker(c).Run();
  if (!s.ok()) {
    std::fprintf(stderr, "chaos-worker %llu: %s\n",
                 static_cast<unsigned long long>(c.id), s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace fencegate::bench
