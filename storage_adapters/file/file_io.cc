// Copyright fencegate authors.

#include "storage_adapters/file/file_io.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace fencegate::file_io {

std::string TempName() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return absl::StrFormat("%s%d-%016x", kFileTempPrefix, ::getpid(), rng());
}

absl::StatusOr<std::string> ReadAt(int fd, uint64_t offset, size_t limit,
                                   absl::string_view path) {
  std::string out(limit, '\0');
  size_t got = 0;
  while (got < limit) {
    const ssize_t n = ::pread(fd, out.data() + got, limit - got,
                              static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, "read", path);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return out;
}

int OpenOrCreateAt(int dir_fd, const std::string& name, int flags,
                   mode_t mode) {
  flags |= O_CLOEXEC | O_NOFOLLOW;
  const int fd = ::openat(dir_fd, name.c_str(), flags);
  if (fd >= 0 || errno != ENOENT) return fd;
  return ::openat(dir_fd, name.c_str(), flags | O_CREAT, mode);
}

absl::Status WriteAllAt(int fd, absl::string_view data, uint64_t offset,
                        absl::string_view path) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::pwrite(fd, data.data() + done, data.size() - done,
                               static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, "write", path);
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status LockUntil(int fd, absl::Time give_up, absl::string_view path) {
  absl::Duration pause = absl::Microseconds(100);
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) return ErrnoStatus(errno, "lock", path);
    if (absl::Now() >= give_up) {
      return absl::DeadlineExceededError(
          absl::StrCat("\"", path, "\" stayed locked"));
    }
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Milliseconds(10));
  }
  return absl::OkStatus();
}

bool IsLeftoverTemporary(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, kFileTempPrefix)) return false;
  const size_t dash = name.find('-');
  int pid = 0;
  if (dash == absl::string_view::npos ||
      !absl::SimpleAtoi(name.substr(0, dash), &pid) || pid <= 0) {
    return true;  // The older form, without a process id.
  }
  // EPERM: the process lives, under another user.
  return ::kill(pid, 0) != 0 && errno == ESRCH;
}

absl::Status ErrnoStatus(int err, absl::string_view what,
                         absl::string_view path) {
  std::string msg =
      absl::StrCat("file adapter: ", what, " \"", path, "\": ", strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(msg);
    case EXDEV:
      return absl::PermissionDeniedError(absl::StrCat(
          "file adapter: \"", path,
          "\" resolves outside the route's root (a symlink escape) or into "
          "another file system mounted beneath it"));
    case ELOOP:
      return absl::PermissionDeniedError(
          absl::StrCat("file adapter: \"", path,
                       "\": too many symlinks, or a /proc magic link"));
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(msg);
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
    case EMFILE:
    case ENFILE:
      return absl::ResourceExhaustedError(msg);
    case ENOTDIR:
    case EISDIR:
      // The path is well formed; what is on disk does not fit it.
      return absl::FailedPreconditionError(msg);
    case ENAMETOOLONG:
      return absl::InvalidArgumentError(msg);
    case EIO:
    case EAGAIN:
      return absl::UnavailableError(msg);
    default:
      return absl::InternalError(msg);
  }
}

int OpenBeneath(int dirfd, const std::string& path, uint64_t flags,
                mode_t mode) {
  struct open_how how;
  std::memset(&how, 0, sizeof(how));
  how.flags = flags | O_CLOEXEC;
  how.mode = (flags & O_CREAT) ? mode : 0;
  // RESOLVE_NO_XDEV: a file system mounted beneath the root is not
  // reached, since the root's syncfs would not make it durable.
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
  int fd;
  do {
    fd = static_cast<int>(
        ::syscall(SYS_openat2, dirfd, path.c_str(), &how, sizeof(how)));
  } while (fd < 0 && errno == EAGAIN);
  return fd;
}

absl::Status FsyncFd(int fd, absl::string_view what, absl::string_view path) {
  if (::fsync(fd) != 0) return ErrnoStatus(errno, what, path);
  return absl::OkStatus();
}

absl::Status SyncFs(int fd, absl::string_view path) {
  if (::syncfs(fd) != 0) {
    return ErrnoStatus(errno, "sync the file system of", path);
  }
  return absl::OkStatus();
}

absl::StatusOr<Fd> OpenSyncHandle(int dir_fd, absl::string_view path) {
  const int fd = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "open", path);
  return Fd(fd);
}

absl::Status WriteAll(int fd, const std::string& data, absl::string_view path) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "write", path);
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace fencegate::file_io
