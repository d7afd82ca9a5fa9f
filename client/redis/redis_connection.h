// Copyright fencegate authors.
//
// RedisConnection: one hiredis connection with timeouts, and the one call
// the Redis token source needs: EVAL of a Lua script returning an integer.
// Private to client/redis/.

#ifndef CLIENT_REDIS_REDIS_CONNECTION_H_
#define CLIENT_REDIS_REDIS_CONNECTION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

struct redisContext;

namespace fencegate::client::redis_internal {

// Not thread safe: one user at a time.
class RedisConnection {
 public:
  // "host:port". INVALID_ARGUMENT for a malformed endpoint; UNAVAILABLE if
  // it cannot connect within `timeout`.
  static absl::StatusOr<std::unique_ptr<RedisConnection>> Connect(
      absl::string_view endpoint, absl::Duration timeout);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // EVAL `script` with `keys` and `args` (binary safe). The script's
  // integer result; INTERNAL for a script error or another reply type;
  // UNAVAILABLE if the connection failed (it is then unusable).
  absl::StatusOr<int64_t> EvalInt(const std::string& script,
                                  const std::vector<std::string>& keys,
                                  const std::vector<std::string>& args);

  // GET `key`: its value, or "" if missing.
  absl::StatusOr<std::string> Get(const std::string& key);

  const std::string& endpoint() const { return endpoint_; }

 private:
  RedisConnection(std::string endpoint, redisContext* context)
      : endpoint_(std::move(endpoint)), context_(context) {}
  // Runs a command; the caller frees the reply (a redisReply*).
  absl::StatusOr<void*> Command(const std::vector<std::string>& argv);

  const std::string endpoint_;
  redisContext* const context_;
};

}  // namespace fencegate::client::redis_internal

#endif  // CLIENT_REDIS_REDIS_CONNECTION_H_
