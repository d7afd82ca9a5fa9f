// Copyright fencegate authors.
//
// A throwaway redis-server for integration tests: /usr/bin/redis-server on
// a free loopback port, without persistence, in a fresh temporary
// directory. Plus a direct command for the tests to tamper with keys behind
// the client's back.

#ifndef TESTS_REDIS_SERVER_H_
#define TESTS_REDIS_SERVER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fencegate::testing {

class RedisServer {
 public:
  // Starts redis-server and waits until it answers PING. UNAVAILABLE with
  // its log if it does not within 30 s.
  static absl::StatusOr<std::unique_ptr<RedisServer>> Start();
  ~RedisServer();  // SIGKILLs it and removes its directory.
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  // "127.0.0.1:PORT".
  std::string endpoint() const;

  // Runs one command (e.g. {"SET", "k", "0"}); the reply as text (an
  // integer in decimal, nil as "").
  absl::StatusOr<std::string> Command(const std::vector<std::string>& argv);

 private:
  RedisServer() = default;
  std::string dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace fencegate::testing

#endif  // TESTS_REDIS_SERVER_H_
