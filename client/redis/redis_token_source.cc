// Copyright fencegate authors.

#include "client/redis/redis_token_source.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/holder_id.h"
#include "client/redis/lock_scripts.h"
#include "client/redis/redis_connection.h"
#include "fencegate/v1/gateway.grpc.pb.h"

namespace fencegate::client {
namespace {

using redis_internal::CounterKey;
using internal::HolderId;
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

absl::Status FromGrpc(const grpc::Status& s, absl::string_view what) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat("gateway ", what, ": ", s.error_message()));
}

class RedisLock final : public HeldLock {
 public:
  RedisLock(std::unique_ptr<RedisConnection> connection, std::string name,
            std::string lock_key, uint64_t token, std::string id,
            absl::Duration ttl, std::function<void()> on_lost)
      : connection_(std::move(connection)),
        name_(std::move(name)),
        lock_key_(std::move(lock_key)),
        token_(token),
        id_(std::move(id)),
        ttl_(ttl),
        on_lost_(std::move(on_lost)) {
    keepalive_ = std::thread([this] { KeepAliveLoop(); });
  }

  ~RedisLock() override {
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
    absl::StatusOr<int64_t> released =
        connection_->EvalInt(kReleaseScript, {lock_key_}, {id_});
    lost_ = true;
    if (!released.ok()) return released.status();
    if (*released != 1) {
      return absl::FailedPreconditionError(absl::StrCat(
          "lock \"", name_, "\" is no longer held by this holder"));
    }
    return absl::OkStatus();
  }

 private:
  void KeepAliveLoop() {
    absl::Time last_renewed = absl::Now();
    while (!stop_.WaitForNotificationWithTimeout(ttl_ / 3)) {
      absl::StatusOr<int64_t> renewed;
      {
        absl::MutexLock lock(&mu_);
        renewed = connection_->EvalInt(
            kRenewScript, {lock_key_},
            {id_, absl::StrCat(absl::ToInt64Milliseconds(ttl_))});
      }
      if (renewed.ok() && *renewed == 1) {
        last_renewed = absl::Now();
        continue;
      }
      // The key is gone or someone else's: lost. An error: keep trying
      // until the ttl since the last renewal has run out.
      if (renewed.ok() || absl::Now() - last_renewed >= ttl_) {
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
  const std::unique_ptr<RedisConnection> connection_ ABSL_PT_GUARDED_BY(mu_);
  const std::string name_;
  const std::string lock_key_;
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

absl::StatusOr<std::unique_ptr<RedisTokenSource>> RedisTokenSource::Create(
    RedisTokenSourceOptions options) {
  if (options.endpoint.rfind(':') == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "redis endpoint \"", options.endpoint, "\" must be host:port"));
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
  for (;;) {
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
  auto gateway = v1::Gateway::NewStub(options_.gateway);
  for (int attempt = 0;; ++attempt) {
    v1::GetFenceRequest get;
    get.set_domain(name);
    v1::FenceState fence;
    grpc::ClientContext get_context;
    get_context.set_deadline(
        absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
    if (grpc::Status s = gateway->GetFence(&get_context, get, &fence);
        !s.ok()) {
      return give_up(FromGrpc(s, "GetFence"));
    }
    if (static_cast<uint64_t>(token) <= fence.highest_token()) {
      if (fence.highest_token() >= kMaxLuaExact) {
        return give_up(absl::OutOfRangeError(absl::StrCat(
            "lock \"", name, "\": the fence (", fence.highest_token(),
            ") is beyond what the redis counter can be raised to (2^53)")));
      }
      absl::StatusOr<int64_t> raised =
          (*connection)
              ->EvalInt(kRaise, {lock_key, counter_key},
                        {id, absl::StrCat(fence.highest_token())});
      if (!raised.ok()) return give_up(raised.status());
      if (*raised < 0) {
        return absl::UnavailableError(absl::StrCat(
            "lock \"", name, "\" was lost while its token was raised"));
      }
      token = *raised;
    }
    v1::FenceRequest raise;
    raise.set_domain(name);
    raise.set_token(static_cast<uint64_t>(token));
    v1::FenceState raised_fence;
    grpc::ClientContext fence_context;
    fence_context.set_deadline(
        absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
    grpc::Status s = gateway->Fence(&fence_context, raise, &raised_fence);
    if (s.ok()) break;
    // Raised past us meanwhile (another source): go round once more.
    if (s.error_code() != grpc::StatusCode::FAILED_PRECONDITION ||
        attempt >= 3) {
      return give_up(FromGrpc(s, "Fence"));
    }
  }
  return std::unique_ptr<HeldLock>(new RedisLock(
      *std::move(connection), name, lock_key, static_cast<uint64_t>(token), id,
      options.ttl, std::move(on_lost)));
}

}  // namespace fencegate::client
