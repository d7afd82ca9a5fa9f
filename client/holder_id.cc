// Copyright fencegate authors.

#include "client/holder_id.h"

#include <unistd.h>

#include <cstdint>
#include <random>

#include "absl/strings/str_format.h"

namespace fencegate::client::internal {

std::string HolderId(const std::string& owner) {
  std::random_device random;
  const uint64_t nonce = (uint64_t{random()} << 32) | random();
  if (!owner.empty()) return absl::StrFormat("%s/%016x", owner, nonce);
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  return absl::StrFormat("%s:%d/%016x", host, ::getpid(), nonce);
}

}  // namespace fencegate::client::internal
