// Copyright fencegate authors.

#include "fencegate/common/named_thread_pool.h"

#include <algorithm>

#include "fencegate/common/thread_name.h"

namespace fencegate {

NamedThreadPool::NamedThreadPool(size_t threads, const std::string& name)
    : work_(io_.get_executor()) {
  threads = std::max<size_t>(1, threads);
  threads_.reserve(threads);
  for (size_t i = 0; i < threads; ++i) {
    threads_.emplace_back([this, name] {
      NameThisThread(name);
      io_.run();
    });
  }
}

NamedThreadPool::~NamedThreadPool() { join(); }

void NamedThreadPool::join() {
  work_.reset();  // run() returns once no work is left.
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

}  // namespace fencegate
