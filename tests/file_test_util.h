// Copyright fencegate authors.
//
// Helpers of the file adapter's tests: a file size limit standing in for a
// full disk, ApplyAsync() waited for, and a crash at a named step.

#ifndef TESTS_FILE_TEST_UTIL_H_
#define TESTS_FILE_TEST_UTIL_H_

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "fencegate/common/sync_point.h"
#include "storage_adapters/storage_adapter.h"

namespace fencegate::testing {

// Sets RLIMIT_FSIZE for the test's scope: a write past it fails with EFBIG
// (SIGXFSZ ignored), as a full disk fails with ENOSPC, at any offset.
class ScopedFileSizeLimit {
 public:
  explicit ScopedFileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &old_);
    old_handler_ = ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit limit = old_;
    limit.rlim_cur = bytes;
    ok_ = ::setrlimit(RLIMIT_FSIZE, &limit) == 0;
  }
  ~ScopedFileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    ::signal(SIGXFSZ, old_handler_);
  }
  ScopedFileSizeLimit(const ScopedFileSizeLimit&) = delete;
  ScopedFileSizeLimit& operator=(const ScopedFileSizeLimit&) = delete;
  bool ok() const { return ok_; }

 private:
  struct rlimit old_;
  sighandler_t old_handler_;
  bool ok_ = false;
};

// adapter.ApplyAsync(), waited for: what its callback was told.
inline absl::Status ApplyAndWait(StorageAdapter& adapter,
                                 const WriteTarget& target,
                                 const Operations& ops, OpResults* results) {
  absl::Status outcome;
  absl::Notification done;
  adapter.ApplyAsync(target, ops, results, [&](absl::Status s) {
    outcome = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  return outcome;
}

// Runs `work` in a forked child process that ends at sync point `point`
// as kill -9 would end it (what it wrote to files stays, nothing else
// runs); true if it reached the point. No thread of the caller may hold a
// lock the child needs while it forks: close adapters first.
inline bool CrashedAt(const char* point, const std::function<void()>& work) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    SyncPoint::Get()->SetCallback(point, [](void*) { ::_exit(42); });
    work();
    ::_exit(0);
  }
  int status = 0;
  return pid > 0 && ::waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
         WEXITSTATUS(status) == 42;
}

}  // namespace fencegate::testing

#endif  // TESTS_FILE_TEST_UTIL_H_
