// Copyright fencegate authors.

#include "gateway/domain_executor.h"

#include "boost/asio/post.hpp"

namespace fencegate {

DomainExecutor::DomainExecutor(size_t threads) : pool_(threads) {}

DomainExecutor::~DomainExecutor() {
  if (!joined_) Join();
}

void DomainExecutor::Post(const std::string& domain,
                          absl::AnyInvocable<void() &&> work) {
  Lane* lane;
  {
    absl::MutexLock lock(&mu_);
    auto [it, inserted] = lanes_.try_emplace(domain);
    if (inserted) {
      it->second = std::make_unique<Lane>(
          boost::asio::make_strand(pool_.get_executor()));
    }
    lane = it->second.get();
    ++lane->pending;
  }
  boost::asio::post(lane->strand,
                    [this, lane, domain, work = std::move(work)]() mutable {
                      std::move(work)();
                      absl::MutexLock lock(&mu_);
                      // The strand's implementation is reference counted, so
                      // the handle may go while this handler still runs on it.
                      if (--lane->pending == 0) lanes_.erase(domain);
                    });
}

void DomainExecutor::PostAny(absl::AnyInvocable<void() &&> work) {
  boost::asio::post(pool_,
                    [work = std::move(work)]() mutable { std::move(work)(); });
}

void DomainExecutor::Join() {
  joined_ = true;
  pool_.join();
}

}  // namespace fencegate
