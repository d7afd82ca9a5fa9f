// Copyright fencegate authors.

#include "storage_adapters/postgres/hold_tally.h"

namespace fencegate::postgres {

void HoldTally::Held(absl::string_view domain, uint64_t token, bool added) {
  absl::MutexLock lock(&mu_);
  Entry& e = held_[domain];
  if (added) ++e.holders;
  if (token != 0) e.token = token;
}

void HoldTally::Gone(absl::string_view domain) {
  absl::MutexLock lock(&mu_);
  auto it = held_.find(domain);
  if (it == held_.end()) return;
  if (--it->second.holders <= 0) held_.erase(it);
}

bool HoldTally::HeldBelow(absl::string_view domain, uint64_t token) const {
  absl::MutexLock lock(&mu_);
  auto it = held_.find(domain);
  return it != held_.end() && it->second.token < token;
}

size_t HoldTally::size() const {
  absl::MutexLock lock(&mu_);
  return held_.size();
}

bool HoldTally::HeldAtAll(absl::string_view domain) const {
  absl::MutexLock lock(&mu_);
  return held_.contains(domain);
}

}  // namespace fencegate::postgres
