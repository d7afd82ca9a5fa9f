// Copyright fencegate authors.

#include "fencegate/client/redis/redlock_token_source.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "client/gateway_fence.h"
#include "client/holder_id.h"
#include "client/kept_lock.h"
#include "client/redis/lock_scripts.h"
#include "client/redis/redis_connection.h"
#include "fencegate/common/host_port.h"

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

class RedlockLock final : public internal::KeptLock {
 public:
  RedlockLock(std::unique_ptr<Nodes> nodes, std::string name, std::string key,
              uint64_t token, std::string id, absl::Duration ttl,
              absl::Time granted, std::function<void()> on_lost)
      : KeptLock(std::move(name), token, ttl, granted, std::move(on_lost)),
        nodes_(std::move(nodes)),
        key_(std::move(key)),
        id_(std::move(id)),
        ttl_(ttl),
        ttl_ms_(absl::StrCat(absl::ToInt64Milliseconds(ttl))) {
    StartKeepAlive();
  }
  ~RedlockLock() override { Shutdown(); }

 private:
  // The servers are the keep-alive thread's until Remove(), which runs
  // after that thread has stopped.
  Renewal Renew() override {
    const absl::Time start = absl::Now();
    const Nodes::Tally tally =
        nodes_->EvalAll(kRenewScript, key_, {id_, ttl_ms_});
    if (tally.yes >= nodes_->quorum() && absl::Now() - start < ttl_) {
      return Renewal::kRenewed;
    }
    // So many answered without our key that no majority can have it.
    return tally.answered - tally.yes >= nodes_->size() - nodes_->quorum() + 1
               ? Renewal::kGone
               : Renewal::kFailed;
  }

  absl::Status Remove() override {
    const Nodes::Tally tally = nodes_->EvalAll(kReleaseScript, key_, {id_});
    if (tally.yes >= nodes_->quorum()) return absl::OkStatus();
    if (tally.answered < nodes_->quorum()) {
      return absl::UnavailableError(
          absl::StrCat("lock \"", name(), "\": only ", tally.answered, " of ",
                       nodes_->size(), " redis servers answered the release"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("lock \"", name(),
                     "\" is no longer held by this holder on a majority"));
  }

  const std::unique_ptr<Nodes> nodes_;
  const std::string key_;
  const std::string id_;
  const absl::Duration ttl_;
  const std::string ttl_ms_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<RedlockTokenSource>> RedlockTokenSource::Create(
    RedlockTokenSourceOptions options) {
  if (options.endpoints.empty()) {
    return absl::InvalidArgumentError("redlock: at least one redis server");
  }
  absl::flat_hash_set<std::string> seen;
  for (const std::string& e : options.endpoints) {
    if (absl::StatusOr<HostPort> parsed =
            ParseHostPort(e, "redlock endpoint",
                          {.need_host = true, .allow_port_zero = false});
        !parsed.ok()) {
      return parsed.status();
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
  if (absl::Status s = internal::CheckLockRequest(name, options); !s.ok()) {
    return s;
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
  absl::Time granted;
  for (;;) {
    id = HolderId(options.owner);
    granted = absl::Now();
    const Nodes::Tally tally = nodes->EvalAll(kTakeScript, key, {id, ttl_ms});
    const absl::Duration validity =
        options.ttl - (absl::Now() - granted) - drift;
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

  // The token: the gateway's fence, raised by one -- within what is left
  // of the lock's validity, and the lock checked again afterwards. (A call
  // the gateway completes after its deadline can still raise the fence past
  // the next holder's token; that holder's writes are then refused as
  // stale, which is safe.)
  const absl::Duration left = options.ttl - (absl::Now() - granted) - drift;
  absl::StatusOr<uint64_t> token =
      left > absl::ZeroDuration()
          ? internal::NextToken(options_.gateway, name, left)
          : absl::DeadlineExceededError("no validity left for a token");
  if (token.ok() &&
      nodes->EvalAll(kRenewScript, key, {id, ttl_ms}).yes < nodes->quorum()) {
    token = absl::UnavailableError(
        absl::StrCat("lock \"", name, "\" expired while its token was issued"));
  }
  if (!token.ok()) {
    nodes->EvalAll(kReleaseScript, key, {id});
    return token.status();
  }
  return std::unique_ptr<HeldLock>(
      new RedlockLock(std::move(nodes), name, key, *token, id, options.ttl,
                      granted, std::move(on_lost)));
}

}  // namespace fencegate::client
