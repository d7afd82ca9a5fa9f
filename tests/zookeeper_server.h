// Copyright fencegate authors.
//
// A throwaway ZooKeeper for integration tests: Debian's zookeeper package
// run as `java -cp ... org.apache.zookeeper.server.ZooKeeperServerMain
// <cfg>` on a free loopback port, with its config and data in a fresh
// temporary directory (tickTime=500, minSessionTimeout=1000, no admin
// server). Start() returns once it answers "ruok".

#ifndef TESTS_ZOOKEEPER_SERVER_H_
#define TESTS_ZOOKEEPER_SERVER_H_

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace fencegate::testing {

class ZooKeeperServer {
 public:
  // UNAVAILABLE with its log if it does not answer within 60 s.
  static absl::StatusOr<std::unique_ptr<ZooKeeperServer>> Start();
  ~ZooKeeperServer();  // SIGKILLs it and removes its directory.
  ZooKeeperServer(const ZooKeeperServer&) = delete;
  ZooKeeperServer& operator=(const ZooKeeperServer&) = delete;

  // "127.0.0.1:PORT".
  std::string endpoint() const;
  // Stops (SIGSTOP) and resumes (SIGCONT) the server process: a partition
  // as its clients see it.
  void Pause();
  void Resume();

 private:
  ZooKeeperServer() = default;
  bool Answers() const;
  std::string dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace fencegate::testing

#endif  // TESTS_ZOOKEEPER_SERVER_H_
