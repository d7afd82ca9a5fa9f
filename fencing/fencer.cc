// Copyright fencegate authors.

#include "fencing/fencer.h"

#include <cstdio>
#include <cstdlib>

#include "fencing/stale_token.h"
#include "fencing/sync_point.h"

namespace fencegate {

// Holds one domain's lock; the table entry lives while anyone uses it.
class Fencer::ScopedDomainLock {
 public:
  ScopedDomainLock(Fencer* fencer, absl::string_view domain)
      : fencer_(fencer), key_(domain) {
    {
      absl::MutexLock lock(&fencer_->mu_);
      auto [it, inserted] = fencer_->locks_.try_emplace(key_);
      if (inserted) it->second = std::make_unique<DomainLock>();
      entry_ = it->second.get();
      ++entry_->users;
    }
    FENCEGATE_SYNC_POINT("Fencer::Execute:BeforeDomainLock");
    entry_->mu.Lock();
  }

  ~ScopedDomainLock() {
    entry_->mu.Unlock();
    absl::MutexLock lock(&fencer_->mu_);
    if (--entry_->users == 0) fencer_->locks_.erase(key_);
  }

  ScopedDomainLock(const ScopedDomainLock&) = delete;
  ScopedDomainLock& operator=(const ScopedDomainLock&) = delete;

 private:
  Fencer* const fencer_;
  const std::string key_;
  // The map holds it by unique_ptr, so it stays put across rehashes; it is
  // erased only when its last user leaves.
  DomainLock* entry_ = nullptr;
};

Fencer::Fencer(FenceStore* store, Clock* clock)
    : store_(store), clock_(clock) {}

Fencer::~Fencer() = default;

absl::StatusOr<FenceDecision> Fencer::Execute(
    absl::string_view domain, uint64_t token,
    absl::FunctionRef<absl::Status()> apply) {
  ScopedDomainLock domain_lock(this, domain);

  absl::StatusOr<FenceState> current = store_->Get(domain);
  if (!current.ok()) return current.status();
  if (token < current->highest_token) {
    return StaleTokenError(domain, token, current->highest_token);
  }
  FENCEGATE_SYNC_POINT_ARG("Fencer::Execute:AfterCheck", &token);

  FenceDecision decision;
  if (token > current->highest_token) {
    absl::StatusOr<FenceState> raised =
        store_->Raise(domain, token, clock_->Now());
    if (!raised.ok()) return raised.status();
    if (raised->highest_token != token) {
      // Only this lock raises the domain in this process; a different value
      // means the store's state moved under us: a broken invariant.
      std::fprintf(stderr,
                   "FATAL fencer: raising domain \"%.*s\" to %llu left %llu\n",
                   static_cast<int>(domain.size()), domain.data(),
                   static_cast<unsigned long long>(token),
                   static_cast<unsigned long long>(raised->highest_token));
      std::abort();
    }
    decision.fence = *std::move(raised);
    decision.advanced = true;
  } else {
    decision.fence = *std::move(current);
  }
  FENCEGATE_SYNC_POINT_ARG("Fencer::Execute:BeforeApply", &token);
  if (absl::Status s = apply(); !s.ok()) return s;
  FENCEGATE_SYNC_POINT_ARG("Fencer::Execute:AfterApply", &token);
  return decision;
}

absl::StatusOr<FenceDecision> Fencer::Fence(absl::string_view domain,
                                            uint64_t token) {
  return Execute(domain, token, [] { return absl::OkStatus(); });
}

absl::StatusOr<FenceState> Fencer::Get(absl::string_view domain) {
  return store_->Get(domain);
}

}  // namespace fencegate
