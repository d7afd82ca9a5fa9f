// Copyright fencegate authors.

#include "fencing/keyed_mutex.h"

#include "fencegate/common/sync_point.h"

namespace fencegate {

KeyedMutex::Lock::Lock(KeyedMutex* owner, absl::string_view key,
                       const char* sync_point)
    : owner_(owner), key_(key) {
  {
    absl::MutexLock lock(&owner_->mu_);
    auto [it, inserted] = owner_->entries_.try_emplace(key_);
    if (inserted) it->second = std::make_unique<Entry>();
    // The map holds entries by unique_ptr, so the pointer survives rehashes;
    // the entry is erased only when its last user leaves.
    entry_ = it->second.get();
    ++entry_->users;
  }
  if (sync_point != nullptr) FENCEGATE_SYNC_POINT(sync_point);
  absl::MutexLock lock(&owner_->mu_);
  owner_->mu_.Await(absl::Condition(
      +[](Entry* e) { return !e->held; }, entry_));
  entry_->held = true;
}

KeyedMutex::Lock::Lock(KeyedMutex* owner, std::string key, Entry* entry)
    : owner_(owner), key_(std::move(key)), entry_(entry) {}

std::optional<KeyedMutex::Lock> KeyedMutex::Lock::TryLock(
    KeyedMutex* owner, absl::string_view key) {
  absl::MutexLock lock(&owner->mu_);
  auto [it, inserted] = owner->entries_.try_emplace(key);
  if (inserted) it->second = std::make_unique<Entry>();
  Entry* entry = it->second.get();
  if (entry->held) return std::nullopt;  // Its users keep the entry.
  entry->held = true;
  ++entry->users;
  return Lock(owner, std::string(key), entry);
}

KeyedMutex::Lock::Lock(Lock&& other) noexcept
    : owner_(other.owner_), key_(std::move(other.key_)), entry_(other.entry_) {
  other.entry_ = nullptr;
}

KeyedMutex::Lock::~Lock() { Release(); }

void KeyedMutex::Lock::Release() {
  if (entry_ == nullptr) return;
  absl::MutexLock lock(&owner_->mu_);
  entry_->held = false;
  if (--entry_->users == 0) owner_->entries_.erase(key_);
  entry_ = nullptr;
}

}  // namespace fencegate
