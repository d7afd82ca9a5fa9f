// Copyright fencegate authors.
//
// File descriptor helpers of the file adapter and its fence records: an
// owning descriptor, errno as a Status, openat2 beneath a directory, and
// complete writes and syncs.

#ifndef STORAGE_ADAPTERS_FILE_FILE_IO_H_
#define STORAGE_ADAPTERS_FILE_FILE_IO_H_

#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace fencegate {

// Prefix of the temporary files the file adapter creates; path segments
// starting with it are refused so a client cannot touch another write's
// temporary file.
inline constexpr absl::string_view kFileTempPrefix = ".fencegate-tmp-";

namespace file_io {

// Owns a file descriptor.
class Fd {
 public:
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = other.fd_;
      other.fd_ = -1;
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// errno `err` of `what` on `path` as a Status: NOT_FOUND, PERMISSION_DENIED
// (EXDEV and ELOOP from openat2 say the path left the root),
// RESOURCE_EXHAUSTED (full disk, quota, descriptors), FAILED_PRECONDITION
// (a directory where a file was meant, or the reverse), INVALID_ARGUMENT,
// UNAVAILABLE (EIO), INTERNAL otherwise.
absl::Status ErrnoStatus(int err, absl::string_view what,
                         absl::string_view path);

// openat2 of `path` relative to `dirfd` with RESOLVE_BENEATH and
// RESOLVE_NO_MAGICLINKS (O_CLOEXEC added): -1 and errno if it fails.
int OpenBeneath(int dirfd, const std::string& path, uint64_t flags,
                mode_t mode = 0);

// openat(dir_fd, name, flags | O_CLOEXEC | O_NOFOLLOW), creating the file
// with `mode` only if it is missing: a plain open first, since an open with
// O_CREAT takes the directory's lock exclusively even for a file that
// exists, and writers of many domains open files of one directory. -1 and
// errno if it fails.
int OpenOrCreateAt(int dir_fd, const std::string& name, int flags, mode_t mode);

// fsync(fd), its error as ErrnoStatus(what, path).
absl::Status FsyncFd(int fd, absl::string_view what, absl::string_view path);

// syncfs(fd): every change to the file system holding `fd` made durable
// (data, metadata, directory entries; the device's cache flushed), its error
// as ErrnoStatus("sync the file system of", path). Write-back errors of any
// file on that file system since the last call through `fd` are reported
// (Linux 5.8+).
absl::Status SyncFs(int fd, absl::string_view path);

// A descriptor of the file system holding `dir_fd`, to syncfs through.
// syncfs reports a write-back error once per open file, so a caller that
// must learn of every error since some point syncs through a descriptor of
// its own, opened at that point (before it writes what it will sync); one
// shared with another caller could have had the error taken already.
absl::StatusOr<Fd> OpenSyncHandle(int dir_fd, absl::string_view path);

// Up to `limit` bytes of `fd` from `offset` (fewer at the file's end;
// retrying short reads and EINTR).
absl::StatusOr<std::string> ReadAt(int fd, uint64_t offset, size_t limit,
                                   absl::string_view path);

// Writes all of `data` to `fd` (retrying short writes and EINTR).
absl::Status WriteAll(int fd, const std::string& data, absl::string_view path);

// flock(LOCK_EX) of `fd`, waiting for another holder (another thread's
// descriptor, another process) until `give_up`, polling with a pause that
// grows from 100 us to 10 ms. DEADLINE_EXCEEDED if it is still held then;
// the errno's status (ErrnoStatus) for another failure.
absl::Status LockUntil(int fd, absl::Time give_up, absl::string_view path);

// Writes all of `data` to `fd` at `offset` (pwrite, retrying short writes
// and EINTR).
absl::Status WriteAllAt(int fd, absl::string_view data, uint64_t offset,
                        absl::string_view path);

// A fresh name for a temporary file: the file adapter's prefix
// (kFileTempPrefix), this process's id and 16 random hex digits, so that
// leftovers can be told from another live process's temporaries.
std::string TempName();

// True if `name` is a temporary that no live process is writing: one named
// by TempName() for a process that no longer exists, or one of the older
// form without a process id.
bool IsLeftoverTemporary(absl::string_view name);

}  // namespace file_io
}  // namespace fencegate

#endif  // STORAGE_ADAPTERS_FILE_FILE_IO_H_
