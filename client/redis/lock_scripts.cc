// Copyright fencegate authors.

#include "client/redis/lock_scripts.h"

#include "absl/strings/str_cat.h"

namespace fencegate::client::redis_internal {

std::string LockKey(const std::string& prefix, const std::string& name) {
  return absl::StrCat("{", prefix, ":", name, "}:lock");
}

std::string CounterKey(const std::string& prefix, const std::string& name) {
  return absl::StrCat("{", prefix, ":", name, "}:token");
}

}  // namespace fencegate::client::redis_internal
