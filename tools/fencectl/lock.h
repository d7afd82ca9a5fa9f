// Copyright fencegate authors.
//
// `fencectl lock`: take a lock from a token source (the gateway's lease
// service, etcd, Redis, Redlock, a PostgreSQL lock table or ZooKeeper), run a
// command with its domain and token in the environment, keep the lock alive,
// release it afterwards. If the lock is lost, the command's process group gets
// SIGTERM.

#ifndef TOOLS_FENCECTL_LOCK_H_
#define TOOLS_FENCECTL_LOCK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "fencegate/client/tls.h"

namespace fencegate {

struct LockFlags {
  std::string addr;  // The gateway.
  client::TlsFiles tls;
  uint64_t ttl_ms = 10000;
  uint64_t wait_ms = 30000;
  std::string etcd_endpoint;
  std::string etcd_lock_prefix;
  client::TlsFiles etcd_tls;
  std::string redis;
  std::string redlock;  // host:port,host:port,...
  std::string redis_prefix;
  std::string postgres;   // libpq DSN of a lock table's database.
  std::string zookeeper;  // ZooKeeper connect string.
};

// Runs `command` under lock `name`; returns fencectl's exit code: the
// command's, 6 if the lock was not acquired or was lost, 5 if the source
// is unreachable, 2 for bad flags, 1 otherwise.
int RunLocked(const LockFlags& flags, const std::string& name,
              const std::vector<std::string>& command);

}  // namespace fencegate

#endif  // TOOLS_FENCECTL_LOCK_H_
