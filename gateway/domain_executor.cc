// Copyright fencegate authors.

#include "gateway/domain_executor.h"

#include "absl/strings/str_cat.h"
#include "boost/asio/post.hpp"
#include "fencegate/common/fatal.h"

namespace fencegate {

DomainExecutor::DomainExecutor(size_t threads) : pool_(threads) {}

DomainExecutor::~DomainExecutor() {
  if (!joined_) Join();
}

DomainExecutor::Lane::Lane(DomainExecutor* executor, std::string domain)
    : executor_(executor), domain_(std::move(domain)) {}

DomainExecutor::Lane::Lane(Lane&& other) noexcept
    : executor_(other.executor_), domain_(std::move(other.domain_)) {
  other.executor_ = nullptr;
}

DomainExecutor::Lane::~Lane() { Release(); }

void DomainExecutor::Lane::Release() {
  if (executor_ == nullptr) return;
  DomainExecutor* executor = executor_;
  executor_ = nullptr;
  executor->Next(domain_);
}

void DomainExecutor::Post(const std::string& domain,
                          absl::AnyInvocable<void() &&> work) {
  // The Lane is released when the work returns.
  PostHeld(domain,
           [work = std::move(work)](Lane) mutable { std::move(work)(); });
}

void DomainExecutor::PostHeld(const std::string& domain, Work work) {
  {
    absl::MutexLock lock(&mu_);
    auto [it, inserted] = lanes_.try_emplace(domain);
    if (!inserted) {
      // The domain is busy: queue behind its running item.
      if (it->second == nullptr) {
        it->second = std::make_unique<std::deque<Work>>();
      }
      it->second->push_back(std::move(work));
      return;
    }
  }
  boost::asio::post(pool_, [this, domain, work = std::move(work)]() mutable {
    RunLane(domain, std::move(work));
  });
}

std::optional<DomainExecutor::Lane> DomainExecutor::TryAcquire(
    const std::string& domain) {
  absl::MutexLock lock(&mu_);
  if (!lanes_.try_emplace(domain).second) return std::nullopt;
  return Lane(this, domain);
}

void DomainExecutor::PostWithLane(Lane lane, Work work) {
  boost::asio::post(pool_,
                    [lane = std::move(lane), work = std::move(work)]() mutable {
                      std::move(work)(std::move(lane));
                    });
}

void DomainExecutor::RunLane(const std::string& domain, Work work) {
  std::move(work)(Lane(this, domain));
}

void DomainExecutor::Next(const std::string& domain) {
  Work next;
  {
    absl::MutexLock lock(&mu_);
    auto it = lanes_.find(domain);
    if (it->second == nullptr || it->second->empty()) {
      lanes_.erase(it);
      return;
    }
    next = std::move(it->second->front());
    it->second->pop_front();
  }
  boost::asio::post(pool_, [this, domain, next = std::move(next)]() mutable {
    RunLane(domain, std::move(next));
  });
}

void DomainExecutor::PostAny(absl::AnyInvocable<void() &&> work) {
  boost::asio::post(pool_,
                    [work = std::move(work)]() mutable { std::move(work)(); });
}

void DomainExecutor::Join() {
  joined_ = true;
  pool_.join();
  absl::MutexLock lock(&mu_);
  if (!lanes_.empty()) {
    // A Lane outlives the executor: its release would touch freed memory.
    Fatal("domain executor",
          absl::StrCat(lanes_.size(), " domain(s) still held at Join"));
  }
}

}  // namespace fencegate
