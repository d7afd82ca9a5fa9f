// Copyright fencegate authors.
//
// The Lua scripts and key names the Redis and Redlock token sources share.
// Each script checks the holder's id before it touches a lock key. Private
// to client/redis/.

#ifndef CLIENT_REDIS_LOCK_SCRIPTS_H_
#define CLIENT_REDIS_LOCK_SCRIPTS_H_

#include <string>

namespace fencegate::client::redis_internal {

// KEYS: lock. ARGV: holder id, ttl ms. 1 if taken, 0 if held.
inline constexpr char kTakeScript[] = R"lua(
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0
)lua";

// KEYS: lock. ARGV: holder id, ttl ms. 1 if renewed, 0 if not ours.
inline constexpr char kRenewScript[] = R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
)lua";

// KEYS: lock. ARGV: holder id. 1 if released, 0 if not ours.
inline constexpr char kReleaseScript[] = R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
)lua";

// The lock's key: "{<prefix>:<name>}:lock" (its hash slot shared with the
// token counter's, "{<prefix>:<name>}:token").
std::string LockKey(const std::string& prefix, const std::string& name);
std::string CounterKey(const std::string& prefix, const std::string& name);

}  // namespace fencegate::client::redis_internal

#endif  // CLIENT_REDIS_LOCK_SCRIPTS_H_
