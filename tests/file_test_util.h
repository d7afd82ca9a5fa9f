// Copyright fencegate authors.
//
// Helpers of the file adapter's tests: a file size limit standing in for a
// full disk, and ApplyAsync() waited for.

#ifndef TESTS_FILE_TEST_UTIL_H_
#define TESTS_FILE_TEST_UTIL_H_

#include <signal.h>
#include <sys/resource.h>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
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

}  // namespace fencegate::testing

#endif  // TESTS_FILE_TEST_UTIL_H_
