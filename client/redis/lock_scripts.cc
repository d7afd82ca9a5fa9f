// Copyright fencegate authors.

#include "client/redis/lock_scripts.h"

#include <unistd.h>

#include <cstdint>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fencegate::client::redis_internal {

std::string HolderId(const std::string& owner) {
  std::random_device random;
  const uint64_t nonce = (uint64_t{random()} << 32) | random();
  if (!owner.empty()) return absl::StrFormat("%s/%016x", owner, nonce);
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  return absl::StrFormat("%s:%d/%016x", host, ::getpid(), nonce);
}

std::string LockKey(const std::string& prefix, const std::string& name) {
  return absl::StrCat("{", prefix, ":", name, "}:lock");
}

std::string CounterKey(const std::string& prefix, const std::string& name) {
  return absl::StrCat("{", prefix, ":", name, "}:token");
}

}  // namespace fencegate::client::redis_internal
