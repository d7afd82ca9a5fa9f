// Copyright fencegate authors.

#include "fencing/domain_turns.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "fencegate/common/fatal.h"
#include "fencegate/common/sync_point.h"

namespace fencegate {

DomainTurns::DomainTurns(Runner runner) : runner_(std::move(runner)) {}

DomainTurns::~DomainTurns() {
  absl::MutexLock lock(&mu_);
  if (!held_.empty()) {
    // A Turn outliving its owner would touch freed memory on release.
    Fatal("domain turns",
          absl::StrCat(held_.size(), " domain(s) still held at destruction"));
  }
}

DomainTurns::Turn::Turn(DomainTurns* owner, std::string domain)
    : owner_(owner), domain_(std::move(domain)) {}

DomainTurns::Turn::Turn(Turn&& other) noexcept
    : owner_(other.owner_), domain_(std::move(other.domain_)) {
  other.owner_ = nullptr;
}

DomainTurns::Turn::~Turn() { Release(); }

void DomainTurns::Turn::Release() {
  if (owner_ == nullptr) return;
  DomainTurns* owner = owner_;
  owner_ = nullptr;
  owner->PassOn(domain_);
}

std::optional<DomainTurns::Turn> DomainTurns::TryTake(
    absl::string_view domain) {
  absl::MutexLock lock(&mu_);
  if (!held_.try_emplace(domain).second) return std::nullopt;
  return Turn(this, std::string(domain));
}

void DomainTurns::Queue(absl::string_view domain, Work work) {
  absl::ReleasableMutexLock lock(&mu_);
  auto [it, inserted] = held_.try_emplace(domain);
  if (!inserted) {
    if (it->second == nullptr) {
      it->second = std::make_unique<std::deque<Waiter>>();
    }
    it->second->push_back(Waiter{std::move(work), nullptr});
    lock.Release();
    FENCEGATE_SYNC_POINT("DomainTurns::Queue:Behind");
    return;
  }
  lock.Release();
  Start(std::string(domain), std::move(work));
}

DomainTurns::Turn DomainTurns::Wait(absl::string_view domain) {
  absl::Notification ready;
  {
    absl::MutexLock lock(&mu_);
    auto [it, inserted] = held_.try_emplace(domain);
    if (inserted) return Turn(this, std::string(domain));
    if (it->second == nullptr) {
      it->second = std::make_unique<std::deque<Waiter>>();
    }
    it->second->push_back(Waiter{nullptr, &ready});
  }
  FENCEGATE_SYNC_POINT("DomainTurns::Wait:Behind");
  // PassOn hands the turn over by notifying: the domain stays held.
  ready.WaitForNotification();
  return Turn(this, std::string(domain));
}

void DomainTurns::PassOn(const std::string& domain) {
  Waiter next;
  {
    absl::MutexLock lock(&mu_);
    auto it = held_.find(domain);
    if (it == held_.end()) {
      Fatal("domain turns",
            absl::StrCat("domain \"", domain, "\" released but not held"));
    }
    if (it->second == nullptr || it->second->empty()) {
      held_.erase(it);
      return;
    }
    next = std::move(it->second->front());
    it->second->pop_front();
  }
  if (next.ready != nullptr) {
    next.ready->Notify();
    return;
  }
  Start(domain, std::move(next.work));
}

void DomainTurns::Start(std::string domain, Work work) {
  // The Turn exists before the work is handed on: work that a Runner
  // drops without running still passes the turn on.
  auto run = [turn = Turn(this, std::move(domain)),
              work = std::move(work)]() mutable {
    std::move(work)(std::move(turn));
  };
  if (runner_) {
    runner_(std::move(run));
  } else {
    std::move(run)();
  }
}

void DomainTurns::CheckHeld(const Turn& turn) const {
  if (turn.owner_ == this) return;
  Fatal("domain turns",
        absl::StrCat("a step of domain \"", turn.domain_,
                     "\" was given a turn that is ",
                     turn.owner_ == nullptr ? "released" : "another's"));
}

}  // namespace fencegate
