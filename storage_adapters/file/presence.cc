// Copyright fencegate authors.

#include "storage_adapters/file/presence.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace fencegate {
namespace {

absl::Status Unavailable(absl::string_view what, const std::string& path) {
  return absl::UnavailableError(absl::StrCat("file root: ", what, " \"", path,
                                             "\": ", std::strerror(errno)));
}

}  // namespace

FilePresence::FilePresence(std::string dir, std::string instance)
    : dir_(std::move(dir)), instance_(std::move(instance)) {}

FilePresence::~FilePresence() {
  absl::MutexLock lock(&mu_);
  if (fd_ < 0) return;
  ::unlink(absl::StrCat(dir_, "/", mine_).c_str());
  ::close(fd_);  // Releases the lock after the name is gone.
}

absl::Status FilePresence::BePresentLocked() {
  if (fd_ >= 0) return absl::OkStatus();
  if (::mkdir(dir_.c_str(), 0755) != 0 && errno != EEXIST) {
    return Unavailable("cannot create", dir_);
  }
  std::random_device device;
  const uint64_t bits = (static_cast<uint64_t>(device()) << 32) | device();
  const std::string name = absl::StrFormat("%s-%016x", instance_, bits);
  // Locked under a name no count reads (a leading dot), then renamed.
  const std::string hidden = absl::StrCat(dir_, "/.", name);
  const int fd =
      ::open(hidden.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Unavailable("cannot create", hidden);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0 ||
      ::rename(hidden.c_str(), absl::StrCat(dir_, "/", name).c_str()) != 0) {
    absl::Status error = Unavailable("cannot lock and name", hidden);
    ::unlink(hidden.c_str());
    ::close(fd);
    return error;
  }
  fd_ = fd;
  mine_ = name;
  return absl::OkStatus();
}

absl::StatusOr<int> FilePresence::Others() {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = BePresentLocked(); !s.ok()) return s;
  DIR* dir = ::opendir(dir_.c_str());
  if (dir == nullptr) return Unavailable("cannot read", dir_);
  absl::flat_hash_set<std::string> others;
  const std::string own_prefix = absl::StrCat(instance_, "-");
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    // A file's instance, whether under its first name (".…") or its own.
    const absl::string_view bare =
        absl::StripPrefix(absl::string_view(name), ".");
    if (absl::StartsWith(bare, own_prefix)) continue;
    const std::string path = absl::StrCat(dir_, "/", name);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;  // Removed meanwhile: its gateway has gone.
    if (::flock(fd, LOCK_SH | LOCK_NB) != 0) {
      // Held: a live (or paused) gateway's.
      others.insert(std::string(bare.substr(0, bare.find('-'))));
    } else {
      ::unlink(path.c_str());  // A gateway that ended without removing it.
    }
    ::close(fd);
  }
  ::closedir(dir);
  return static_cast<int>(others.size());
}

}  // namespace fencegate
