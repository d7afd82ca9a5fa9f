// Copyright fencegate authors.

#include "client/redis/redlock_token_source.h"

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/holder_id.h"
#include "client/redis/lock_scripts.h"
#include "client/redis/redis_connection.h"
#include "fencegate/v1/gateway.grpc.pb.h"

namespace fencegate::client {
namespace {

using internal::HolderId;
using redis_internal::kReleaseScript;
using redis_internal::kRenewScript;
using redis_internal::kTakeScript;
using redis_internal::LockKey;
using redis_internal::RedisConnection;

// The independent servers, each with a connection opened on demand and
// dropped when it fails. Not thread safe.
class Nodes {
 public:
  Nodes(const std::vector<std::string>& endpoints, absl::Duration timeout)
      : endpoints_(endpoints),
        connections_(endpoints.size()),
        timeout_(timeout) {}

  struct Tally {
    int yes = 0;       // Servers whose script returned 1.
    int answered = 0;  // Servers that answered at all.
  };

  // Runs `script` on every server in turn.
  Tally EvalAll(const char* script, const std::string& key,
                const std::vector<std::string>& args) {
    Tally tally;
    for (size_t i = 0; i < endpoints_.size(); ++i) {
      if (connections_[i] == nullptr) {
        absl::StatusOr<std::unique_ptr<RedisConnection>> c =
            RedisConnection::Connect(endpoints_[i], timeout_);
        if (!c.ok()) continue;
        connections_[i] = *std::move(c);
      }
      absl::StatusOr<int64_t> r = connections_[i]->EvalInt(script, {key}, args);
      if (!r.ok()) {
        if (absl::IsUnavailable(r.status())) connections_[i].reset();
        continue;
      }
      ++tally.answered;
      tally.yes += *r == 1;
    }
    return tally;
  }

  int size() const { return static_cast<int>(endpoints_.size()); }
  int quorum() const { return size() / 2 + 1; }

 private:
  const std::vector<std::string> endpoints_;
  std::vector<std::unique_ptr<RedisConnection>> connections_;
  const absl::Duration timeout_;
};

class RedlockLock final : public HeldLock {
 public:
  RedlockLock(std::unique_ptr<Nodes> nodes, std::string name, std::string key,
              uint64_t token, std::string id, absl::Duration ttl,
              std::function<void()> on_lost)
      : nodes_(std::move(nodes)),
        name_(std::move(name)),
        key_(std::move(key)),
        token_(token),
        id_(std::move(id)),
        ttl_(ttl),
        on_lost_(std::move(on_lost)) {
    keepalive_ = std::thread([this] { KeepAliveLoop(); });
  }

  ~RedlockLock() override {
    if (!released_) Release().IgnoreError();  // Best effort; it expires too.
    StopKeepAlive();
  }

  const std::string& name() const override { return name_; }
  uint64_t token() const override { return token_; }
  bool lost() const override { return lost_.load(); }

  absl::Status Release() override {
    StopKeepAlive();
    released_ = true;
    absl::MutexLock lock(&mu_);
    const Nodes::Tally tally = nodes_->EvalAll(kReleaseScript, key_, {id_});
    lost_ = true;
    if (tally.yes >= nodes_->quorum()) return absl::OkStatus();
    if (tally.answered < nodes_->quorum()) {
      return absl::UnavailableError(
          absl::StrCat("lock \"", name_, "\": only ", tally.answered, " of ",
                       nodes_->size(), " redis servers answered the release"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "lock \"", name_, "\" is no longer held by this holder on a majority"));
  }

 private:
  void KeepAliveLoop() {
    absl::Time last_renewed = absl::Now();
    const std::string ttl_ms = absl::StrCat(absl::ToInt64Milliseconds(ttl_));
    while (!stop_.WaitForNotificationWithTimeout(ttl_ / 3)) {
      const absl::Time start = absl::Now();
      Nodes::Tally tally;
      {
        absl::MutexLock lock(&mu_);
        tally = nodes_->EvalAll(kRenewScript, key_, {id_, ttl_ms});
      }
      if (tally.yes >= nodes_->quorum() && absl::Now() - start < ttl_) {
        last_renewed = start;
        continue;
      }
      // A majority that answered without our key: lost. Too few answers:
      // keep trying until the ttl since the last renewal has run out.
      const bool gone =
          tally.answered - tally.yes >= nodes_->size() - nodes_->quorum() + 1;
      if (gone || absl::Now() - last_renewed >= ttl_) {
        if (!lost_.exchange(true) && on_lost_) on_lost_();
        return;
      }
    }
  }

  void StopKeepAlive() {
    if (!stop_.HasBeenNotified()) stop_.Notify();
    if (keepalive_.joinable()) keepalive_.join();
  }

  absl::Mutex mu_;
  const std::unique_ptr<Nodes> nodes_ ABSL_PT_GUARDED_BY(mu_);
  const std::string name_;
  const std::string key_;
  const uint64_t token_;
  const std::string id_;
  const absl::Duration ttl_;
  std::function<void()> on_lost_;
  std::atomic<bool> lost_{false};
  bool released_ = false;
  absl::Notification stop_;
  std::thread keepalive_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<RedlockTokenSource>> RedlockTokenSource::Create(
    RedlockTokenSourceOptions options) {
  if (options.endpoints.empty()) {
    return absl::InvalidArgumentError("redlock: at least one redis server");
  }
  absl::flat_hash_set<std::string> seen;
  for (const std::string& e : options.endpoints) {
    if (e.rfind(':') == std::string::npos || e.rfind(':') == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("redlock endpoint \"", e, "\" must be host:port"));
    }
    if (!seen.insert(e).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("redlock endpoint \"", e, "\" is listed twice"));
    }
  }
  if (options.prefix.empty()) {
    return absl::InvalidArgumentError("redlock key prefix must not be empty");
  }
  if (options.node_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("redlock node_timeout must be positive");
  }
  if (options.gateway == nullptr) {
    return absl::InvalidArgumentError(
        "the redlock token source needs the gateway's channel (it issues "
        "the tokens)");
  }
  return std::unique_ptr<RedlockTokenSource>(
      new RedlockTokenSource(std::move(options)));
}

RedlockTokenSource::RedlockTokenSource(RedlockTokenSourceOptions options)
    : options_(std::move(options)) {}

RedlockTokenSource::~RedlockTokenSource() = default;

absl::StatusOr<std::unique_ptr<HeldLock>> RedlockTokenSource::Acquire(
    const std::string& name, const LockOptions& options,
    std::function<void()> on_lost) {
  if (name.empty() || name.size() > 512 ||
      name.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(
        "lock name: 1 to 512 bytes, no NUL (it is the fencing domain)");
  }
  if (options.ttl < absl::Milliseconds(100) ||
      options.wait < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "ttl must be at least 100 ms and wait not negative");
  }
  auto nodes =
      std::make_unique<Nodes>(options_.endpoints, options_.node_timeout);
  const std::string key = LockKey(options_.prefix, name);
  const std::string ttl_ms =
      absl::StrCat(absl::ToInt64Milliseconds(options.ttl));
  const absl::Duration drift = options.ttl / 100 + absl::Milliseconds(2);
  const absl::Time deadline = absl::Now() + options.wait;
  std::minstd_rand random(std::random_device{}());
  std::string id;
  for (;;) {
    id = HolderId(options.owner);
    const absl::Time start = absl::Now();
    const Nodes::Tally tally = nodes->EvalAll(kTakeScript, key, {id, ttl_ms});
    const absl::Duration validity = options.ttl - (absl::Now() - start) - drift;
    if (tally.yes >= nodes->quorum() && validity > absl::ZeroDuration()) break;
    nodes->EvalAll(kReleaseScript, key, {id});
    if (absl::Now() >= deadline) {
      if (tally.answered < nodes->quorum()) {
        return absl::UnavailableError(
            absl::StrCat("redlock: only ", tally.answered, " of ",
                         nodes->size(), " redis servers answered; a majority (",
                         nodes->quorum(), ") is needed"));
      }
      return absl::DeadlineExceededError(
          absl::StrCat("lock \"", name, "\" is held on a majority"));
    }
    // A random pause, so that contenders do not split the servers again.
    const absl::Duration pause =
        absl::Milliseconds(20 + static_cast<int>(random() % 60));
    absl::SleepFor(std::min(pause, deadline - absl::Now()));
  }

  // The token: the gateway's fence, raised by one.
  v1::SequenceRequest request;
  request.set_domain(name);
  v1::FenceState fence;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  grpc::Status s = v1::Gateway::NewStub(options_.gateway)
                       ->Sequence(&context, request, &fence);
  if (!s.ok()) {
    nodes->EvalAll(kReleaseScript, key, {id});
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        absl::StrCat("gateway Sequence: ", s.error_message()));
  }
  return std::unique_ptr<HeldLock>(
      new RedlockLock(std::move(nodes), name, key, fence.highest_token(), id,
                      options.ttl, std::move(on_lost)));
}

}  // namespace fencegate::client
