// Copyright fencegate authors.

#include "storage_adapters/file/file_versions.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "storage_adapters/file/checked_slot.h"
#include "storage_adapters/file/fence_records.h"

namespace fencegate {
namespace {

using file_io::ErrnoStatus;
using file_io::Fd;

constexpr char kVersionMagic[] = "fencegate-version 1";
constexpr absl::Duration kMaxLockWait = absl::Seconds(30);

}  // namespace

absl::StatusOr<std::unique_ptr<FileVersions>> FileVersions::Open(
    int root_fd, const std::string& root) {
  const std::string reserved = absl::StrCat(root, "/", kFileReservedDirectory);
  const std::string path = absl::StrCat(reserved, "/versions");
  Fd parent(file_io::OpenBeneath(root_fd, std::string(kFileReservedDirectory),
                                 O_RDONLY | O_DIRECTORY));
  if (!parent.valid()) return ErrnoStatus(errno, "open directory", reserved);
  if (::mkdirat(parent.get(), "versions", 0755) == 0) {
    // The new directory's entry made durable.
    if (absl::Status s = file_io::FsyncFd(parent.get(), "fsync", reserved);
        !s.ok()) {
      return s;
    }
  } else if (errno != EEXIST) {
    return ErrnoStatus(errno, "create directory", path);
  }
  Fd dir(
      file_io::OpenBeneath(parent.get(), "versions", O_RDONLY | O_DIRECTORY));
  if (!dir.valid()) return ErrnoStatus(errno, "open directory", path);
  return std::unique_ptr<FileVersions>(new FileVersions(std::move(dir), path));
}

FileVersions::FileVersions(Fd dir, std::string path)
    : dir_(std::move(dir)), path_(std::move(path)) {}

FileVersions::Held::Held(int dir, std::string name, Fd file, std::string where,
                         uint64_t version, int slot)
    : dir_(dir),
      name_(std::move(name)),
      file_(std::move(file)),
      where_(std::move(where)),
      version_(version),
      slot_(slot) {}

FileVersions::Held::Held(Held&& other) noexcept
    : dir_(other.dir_),
      name_(std::move(other.name_)),
      file_(std::move(other.file_)),
      where_(std::move(other.where_)),
      version_(other.version_),
      slot_(other.slot_) {}

FileVersions::Held::~Held() {
  // Still locked: a writer waiting on this file finds it gone once it has
  // the lock (Lock), and opens the path's next one. Best effort: a file
  // left is one more at version 0, as it was before.
  if (file_.valid() && slot_ < 0) ::unlinkat(dir_, name_.c_str(), 0);
}

absl::StatusOr<FileVersions::Held> FileVersions::Lock(
    absl::string_view path, absl::Time deadline) const {
  std::string name = Sha256Hex(path);
  std::string where = absl::StrCat(path_, "/", name);
  const absl::Time until = std::min(deadline, absl::Now() + kMaxLockWait);
  Fd file;
  while (true) {
    file = Fd(file_io::OpenOrCreateAt(dir_.get(), name, O_RDWR, 0644));
    if (!file.valid()) return ErrnoStatus(errno, "open version of", where);
    const absl::Status locked = file_io::LockUntil(file.get(), until, where);
    if (absl::IsDeadlineExceeded(locked)) {
      return absl::UnavailableError(absl::StrCat(
          "file adapter: \"", absl::CHexEscape(path),
          "\" stayed locked by another writer (another domain's write to it, "
          "or another gateway process on this root) until the deadline; "
          "nothing was written"));
    }
    if (!locked.ok()) return locked;
    // The holder before may have removed the file (~Held): locked, it must
    // still be the one the name leads to.
    struct stat held, named;
    if (::fstat(file.get(), &held) != 0) {
      return ErrnoStatus(errno, "stat version of", where);
    }
    if (::fstatat(dir_.get(), name.c_str(), &named, AT_SYMLINK_NOFOLLOW) == 0) {
      if (held.st_ino == named.st_ino && held.st_dev == named.st_dev) break;
    } else if (errno != ENOENT) {
      return ErrnoStatus(errno, "stat version of", where);
    }
  }
  absl::StatusOr<std::string> text =
      file_io::ReadAt(file.get(), 0, 2 * kCheckedSlotBytes, where);
  if (!text.ok()) return text.status();
  uint64_t version = 0;
  int slot = -1;
  for (int i = 0; i < 2; ++i) {
    const size_t at = i * kCheckedSlotBytes;
    if (text->size() <= at) break;
    std::optional<std::string> line = ParseCheckedSlot(
        absl::string_view(*text).substr(at, kCheckedSlotBytes), kVersionMagic);
    uint64_t read = 0;
    if (!line.has_value() || !absl::SimpleAtoi(*line, &read)) continue;
    if (slot < 0 || read > version) {
      version = read;
      slot = i;
    }
  }
  return Held(dir_.get(), std::move(name), std::move(file), std::move(where),
              version, slot);
}

absl::Status FileVersions::Held::PrepareRaise() {
  if (version_ == UINT64_MAX) {
    return absl::OutOfRangeError(
        absl::StrCat("file adapter: the version of ", where_, " is at 2^64-1"));
  }
  const int slot = slot_ == 0 ? 1 : 0;
  // Cut short, a slot fails its checksum, and the other one stands.
  if (absl::Status s = file_io::WriteAllAt(
          file_.get(),
          CheckedSlotText(kVersionMagic, absl::StrCat(version_ + 1)),
          slot * kCheckedSlotBytes, where_);
      !s.ok()) {
    return s;
  }
  ++version_;
  slot_ = slot;
  return absl::OkStatus();
}

}  // namespace fencegate
