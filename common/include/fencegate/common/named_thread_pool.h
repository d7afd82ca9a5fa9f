// Copyright fencegate authors.
//
// NamedThreadPool: a fixed number of threads, each named (thread_name.h),
// running the work posted to its executor in posting order as threads free
// up -- boost::asio::thread_pool, whose threads cannot be named, with the
// same join(): the work posted before it is done, then the threads end.
//
// Thread safety: executor() and post from any thread; join() from any
// thread but the pool's own, once the pool's users have stopped posting
// (work posted after join() began is not run).

#ifndef FENCEGATE_COMMON_NAMED_THREAD_POOL_H_
#define FENCEGATE_COMMON_NAMED_THREAD_POOL_H_

#include <cstddef>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/io_context.hpp"

namespace fencegate {

class NamedThreadPool {
 public:
  using executor_type = boost::asio::io_context::executor_type;

  // Starts `threads` threads (at least one), each named `name`.
  NamedThreadPool(size_t threads, const std::string& name);
  NamedThreadPool(const NamedThreadPool&) = delete;
  NamedThreadPool& operator=(const NamedThreadPool&) = delete;
  // Joins if join() was not called.
  ~NamedThreadPool();

  executor_type get_executor() noexcept { return io_.get_executor(); }

  // Runs what was posted, then ends the threads. Idempotent.
  void join();

 private:
  boost::asio::io_context io_;
  std::optional<boost::asio::executor_work_guard<executor_type>> work_;
  std::vector<std::thread> threads_;
};

}  // namespace fencegate

#endif  // FENCEGATE_COMMON_NAMED_THREAD_POOL_H_
