// Copyright fencegate authors.

#include "gateway/domain_executor.h"

#include "boost/asio/post.hpp"

namespace fencegate {

DomainExecutor::DomainExecutor(size_t threads) : pool_(threads) {}

DomainExecutor::~DomainExecutor() {
  if (!joined_) Join();
}

void DomainExecutor::Post(const std::string& domain, Work work) {
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

void DomainExecutor::RunLane(const std::string& domain, Work work) {
  std::move(work)();
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

void DomainExecutor::PostAny(Work work) {
  boost::asio::post(pool_,
                    [work = std::move(work)]() mutable { std::move(work)(); });
}

void DomainExecutor::Join() {
  joined_ = true;
  pool_.join();
}

}  // namespace fencegate
