// Copyright fencegate authors.

#include "gateway/io_pool.h"

#include "boost/asio/post.hpp"

namespace fencegate {

IoPool::IoPool(size_t threads) : pool_(threads) {}

IoPool::~IoPool() {
  if (!joined_.load()) Join();
}

void IoPool::Post(absl::AnyInvocable<void() &&> work) {
  if (joined_.load(std::memory_order_acquire)) {
    std::move(work)();
    return;
  }
  boost::asio::post(pool_,
                    [work = std::move(work)]() mutable { std::move(work)(); });
}

void IoPool::Join() {
  pool_.join();
  joined_.store(true, std::memory_order_release);
}

}  // namespace fencegate
