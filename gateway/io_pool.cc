// Copyright fencegate authors.

#include "gateway/io_pool.h"

#include "boost/asio/post.hpp"

namespace fencegate {

IoPool::IoPool(size_t threads, const std::string& name)
    : pool_(threads, name) {}

IoPool::~IoPool() { Join(); }

void IoPool::Post(absl::AnyInvocable<void() &&> work) {
  {
    // Checked and posted under the lock: Join() cannot stop the threads
    // between the two, which would drop the work.
    absl::ReaderMutexLock lock(&mu_);
    if (!joined_) {
      boost::asio::post(
          pool_.get_executor(),
          [work = std::move(work)]() mutable { std::move(work)(); });
      return;
    }
  }
  std::move(work)();  // NOLINT(bugprone-use-after-move): not moved if here.
}

void IoPool::Join() {
  {
    absl::MutexLock lock(&mu_);
    if (joined_) return;
    joined_ = true;
  }
  pool_.join();  // Runs what was posted before; later work runs inline.
}

}  // namespace fencegate
