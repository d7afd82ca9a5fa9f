// Copyright fencegate authors.

#include "storage_adapters/postgres/held_domains.h"

#include <algorithm>

namespace fencegate::postgres {

bool HeldDomains::Use(absl::string_view domain, uint64_t token) {
  auto it = index_.find(domain);
  if (it == index_.end() || it->second->second != token) return false;
  order_.splice(order_.begin(), order_, it->second);
  return true;
}

void HeldDomains::Held(absl::string_view domain, uint64_t token) {
  if (tally_ != nullptr) tally_->Held(domain, token, !Present(domain));
  auto it = index_.find(domain);
  if (it != index_.end()) {
    it->second->second = token;
    order_.splice(order_.begin(), order_, it->second);
  } else {
    order_.emplace_front(std::string(domain), token);
    index_.emplace(order_.front().first, order_.begin());
  }
  // Held again: a release owed from before would give up the new hold.
  owed_.erase(std::remove(owed_.begin(), owed_.end(), domain), owed_.end());
  while (order_.size() > bound_) {
    std::string last = std::move(order_.back().first);
    index_.erase(last);
    order_.pop_back();
    Owe(std::move(last));
  }
}

void HeldDomains::Release(absl::string_view domain) {
  if (tally_ != nullptr && !Present(domain)) tally_->Held(domain, 0, true);
  auto it = index_.find(domain);
  if (it != index_.end()) {
    order_.erase(it->second);
    index_.erase(it);
  }
  Owe(std::string(domain));
}

bool HeldDomains::Holds(absl::string_view domain) const {
  return index_.contains(domain) ||
         std::find(owed_.begin(), owed_.end(), domain) != owed_.end();
}

std::vector<std::string> HeldDomains::TakeReleases() {
  std::vector<std::string> taken;
  taken.swap(owed_);
  if (tally_ != nullptr) {
    for (const std::string& domain : taken) tally_->Gone(domain);
  }
  return taken;
}

std::vector<std::string> HeldDomains::Domains() const {
  std::vector<std::string> all(owed_);
  for (const auto& [domain, token] : order_) all.push_back(domain);
  return all;
}

void HeldDomains::Clear() {
  if (tally_ != nullptr) {
    for (const std::string& domain : Domains()) tally_->Gone(domain);
  }
  order_.clear();
  index_.clear();
  owed_.clear();
}

void HeldDomains::Owe(std::string domain) {
  if (std::find(owed_.begin(), owed_.end(), domain) == owed_.end()) {
    owed_.push_back(std::move(domain));
  }
}

}  // namespace fencegate::postgres
