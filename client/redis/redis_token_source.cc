// Copyright fencegate authors.

#include "fencegate/client/redis/redis_token_source.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/gateway_fence.h"
#include "client/holder_id.h"
#include "client/kept_lock.h"
#include "client/redis/lock_scripts.h"
#include "client/redis/redis_connection.h"
#include "fencegate/common/host_port.h"

namespace fencegate::client {
namespace {

using internal::HolderId;
using redis_internal::CounterKey;
using redis_internal::kReleaseScript;
using redis_internal::kRenewScript;
using redis_internal::LockKey;
using redis_internal::RedisConnection;

// KEYS: lock, counter. ARGV: holder id, ttl ms. The token, or 0 if held.
constexpr char kAcquire[] = R"lua(
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0
)lua";

// KEYS: lock, counter. ARGV: holder id, floor. As the holder only: raises
// the counter to at least `floor` and takes the next token; -1 if the lock
// is not ours.
constexpr char kRaise[] = R"lua(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local floor = tonumber(ARGV[2])
local count = tonumber(redis.call('GET', KEYS[2]) or '0')
if count < floor then redis.call('SET', KEYS[2], ARGV[2]) end
return redis.call('INCR', KEYS[2])
)lua";

// The gateway's fence may be at most 2^53 for the raise script, whose Lua
// numbers are doubles.
constexpr uint64_t kMaxLuaExact = uint64_t{1} << 53;

class RedisLock final : public internal::KeptLock {
 public:
  RedisLock(std::unique_ptr<RedisConnection> connection, absl::Duration timeout,
            std::string name, std::string lock_key, uint64_t token,
            std::string id, absl::Duration ttl, absl::Time granted,
            std::function<void()> on_lost)
      : KeptLock(std::move(name), token, ttl, granted, std::move(on_lost)),
        connection_(std::move(connection)),
        timeout_(timeout),
        lock_key_(std::move(lock_key)),
        id_(std::move(id)),
        ttl_ms_(absl::StrCat(absl::ToInt64Milliseconds(ttl))) {
    StartKeepAlive();
  }
  ~RedisLock() override { Shutdown(); }

 private:
  // The connection is the keep-alive thread's until Remove(), which runs
  // after that thread has stopped.
  Renewal Renew() override {
    absl::StatusOr<int64_t> renewed =
        Eval(kRenewScript, {lock_key_}, {id_, ttl_ms_});
    if (!renewed.ok()) return Renewal::kFailed;
    return *renewed == 1 ? Renewal::kRenewed : Renewal::kGone;
  }

  absl::Status Remove() override {
    absl::StatusOr<int64_t> released = Eval(kReleaseScript, {lock_key_}, {id_});
    if (!released.ok()) return released.status();
    if (*released != 1) {
      return absl::FailedPreconditionError(absl::StrCat(
          "lock \"", name(), "\" is no longer held by this holder"));
    }
    return absl::OkStatus();
  }

  // A connection that failed cannot be used again: the next call opens a
  // new one.
  absl::StatusOr<int64_t> Eval(const char* script,
                               const std::vector<std::string>& keys,
                               const std::vector<std::string>& args) {
    if (connection_ == nullptr) {
      absl::StatusOr<std::unique_ptr<RedisConnection>> c =
          RedisConnection::Connect(endpoint_, timeout_);
      if (!c.ok()) return c.status();
      connection_ = *std::move(c);
    }
    absl::StatusOr<int64_t> r = connection_->EvalInt(script, keys, args);
    if (!r.ok() && absl::IsUnavailable(r.status())) connection_.reset();
    return r;
  }

  std::unique_ptr<RedisConnection> connection_;
  const std::string endpoint_ = connection_->endpoint();
  const absl::Duration timeout_;
  const std::string lock_key_;
  const std::string id_;
  const std::string ttl_ms_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<RedisTokenSource>> RedisTokenSource::Create(
    RedisTokenSourceOptions options) {
  if (absl::StatusOr<HostPort> parsed =
          ParseHostPort(options.endpoint, "redis endpoint",
                        {.need_host = true, .allow_port_zero = false});
      !parsed.ok()) {
    return parsed.status();
  }
  if (options.prefix.empty()) {
    return absl::InvalidArgumentError("redis key prefix must not be empty");
  }
  if (options.rpc_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("redis rpc_timeout must be positive");
  }
  if (options.gateway == nullptr) {
    return absl::InvalidArgumentError(
        "the redis token source needs the gateway's channel");
  }
  return std::unique_ptr<RedisTokenSource>(
      new RedisTokenSource(std::move(options)));
}

RedisTokenSource::RedisTokenSource(RedisTokenSourceOptions options)
    : options_(std::move(options)) {}

RedisTokenSource::~RedisTokenSource() = default;

absl::StatusOr<std::unique_ptr<HeldLock>> RedisTokenSource::Acquire(
    const std::string& name, const LockOptions& options,
    std::function<void()> on_lost) {
  if (absl::Status s = internal::CheckLockRequest(name, options); !s.ok()) {
    return s;
  }
  absl::StatusOr<std::unique_ptr<RedisConnection>> connection =
      RedisConnection::Connect(options_.endpoint, options_.rpc_timeout);
  if (!connection.ok()) return connection.status();
  const std::string lock_key = LockKey(options_.prefix, name);
  const std::string counter_key = CounterKey(options_.prefix, name);
  const std::string id = HolderId(options.owner);
  const std::string ttl_ms =
      absl::StrCat(absl::ToInt64Milliseconds(options.ttl));

  // Take the lock, polling while someone else holds it.
  const absl::Time deadline = absl::Now() + options.wait;
  int64_t token = 0;
  absl::Time granted;
  for (;;) {
    granted = absl::Now();
    absl::StatusOr<int64_t> taken =
        (*connection)->EvalInt(kAcquire, {lock_key, counter_key}, {id, ttl_ms});
    if (!taken.ok()) return taken.status();
    token = *taken;
    if (token > 0) break;
    if (absl::Now() >= deadline) {
      absl::StatusOr<std::string> holder = (*connection)->Get(lock_key);
      return absl::DeadlineExceededError(
          absl::StrCat("lock \"", name, "\" is held by \"",
                       holder.ok() ? *holder : "(unknown)", "\""));
    }
    absl::SleepFor(std::min(absl::Milliseconds(50), deadline - absl::Now()));
  }
  auto give_up = [&](absl::Status why) {
    (*connection)->EvalInt(kReleaseScript, {lock_key}, {id}).IgnoreError();
    return why;
  };

  // A counter at or below the fence (a failover lost increments) is raised
  // above it; then the fence is raised to the token before the holder works.
  for (int attempt = 0;; ++attempt) {
    absl::StatusOr<uint64_t> fence =
        internal::ReadFence(options_.gateway, name);
    if (!fence.ok()) return give_up(fence.status());
    if (static_cast<uint64_t>(token) <= *fence) {
      if (*fence >= kMaxLuaExact) {
        return give_up(absl::OutOfRangeError(absl::StrCat(
            "lock \"", name, "\": the fence (", *fence,
            ") is beyond what the redis counter can be raised to (2^53)")));
      }
      absl::StatusOr<int64_t> raised =
          (*connection)
              ->EvalInt(kRaise, {lock_key, counter_key},
                        {id, absl::StrCat(*fence)});
      if (!raised.ok()) return give_up(raised.status());
      if (*raised < 0) {
        return absl::UnavailableError(absl::StrCat(
            "lock \"", name, "\" was lost while its token was raised"));
      }
      token = *raised;
    }
    absl::Status s = internal::RaiseFence(options_.gateway, name,
                                          static_cast<uint64_t>(token));
    if (s.ok()) {
      // Still ours? A failover that lost our key (and its increment) can
      // have handed the lock, and the same token, to another meanwhile:
      // of two such holders only the one whose id the key holds goes on.
      absl::StatusOr<int64_t> ours =
          (*connection)->EvalInt(kRenewScript, {lock_key}, {id, ttl_ms});
      if (!ours.ok()) return give_up(ours.status());
      if (*ours != 1) {
        return absl::UnavailableError(absl::StrCat(
            "lock \"", name, "\" was lost while it was being taken"));
      }
      break;
    }
    // Raised past us meanwhile (another source): go round once more.
    if (!absl::IsFailedPrecondition(s) || attempt >= 3) return give_up(s);
  }
  return std::unique_ptr<HeldLock>(
      new RedisLock(*std::move(connection), options_.rpc_timeout, name,
                    lock_key, static_cast<uint64_t>(token), id, options.ttl,
                    granted, std::move(on_lost)));
}

}  // namespace fencegate::client
