// Copyright fencegate authors.
//
// Helpers of the file adapter's tests: a file size limit standing in for a
// full disk, ApplyAsync() waited for, a crash at a named step, and a
// fixture with an adapter on a fresh root.

#ifndef TESTS_FILE_TEST_UTIL_H_
#define TESTS_FILE_TEST_UTIL_H_

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "fencegate/common/sync_point.h"
#include "storage_adapters/file/file_adapter.h"
#include "storage_adapters/storage_adapter.h"
#include "tests/test_util.h"

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

// A file adapter on a fresh root (`root_`), opened again by Open() as a
// restarted gateway would open it. Sync point callbacks are cleared after
// each test.
class FileRootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_.path() + "/root";
    adapter_ = Open();
    ASSERT_NE(adapter_, nullptr);
  }
  void TearDown() override { SyncPoint::Get()->ClearAll(); }
  std::unique_ptr<FileAdapter> Open() {
    auto adapter = FileAdapter::Open(root_);
    EXPECT_TRUE(adapter.ok()) << adapter.status();
    return adapter.ok() ? *std::move(adapter) : nullptr;
  }

  TempDir dir_;
  std::string root_;
  std::unique_ptr<FileAdapter> adapter_;
};

}  // namespace fencegate::testing

#endif  // TESTS_FILE_TEST_UTIL_H_
