// Copyright fencegate authors.

#include "storage_adapters/file/file_adapter.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "fencegate/common/stale_token.h"
#include "fencegate/common/sync_point.h"
#include "storage_adapters/file/file_io.h"

namespace fencegate {
namespace {

using file_io::ErrnoStatus;
using file_io::Fd;
using file_io::FsyncFd;
using file_io::OpenBeneath;
using file_io::TempName;
using file_io::WriteAll;

constexpr size_t kMaxPathBytes = 4096;
// Longest name of one path segment (NAME_MAX on Linux file systems).
constexpr size_t kMaxNameBytes = 255;

struct SplitPath {
  std::string dir;   // "" for the root itself
  std::string leaf;  // last segment
};

SplitPath Split(absl::string_view path) {
  size_t slash = path.rfind('/');
  if (slash == absl::string_view::npos) return {"", std::string(path)};
  return {std::string(path.substr(0, slash)),
          std::string(path.substr(slash + 1))};
}

}  // namespace

absl::Status ValidateFilePath(absl::string_view path) {
  if (path.empty()) {
    return absl::InvalidArgumentError(
        "resource: the file path after the route is empty");
  }
  if (path.size() > kMaxPathBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("resource: file path of ", path.size(), " bytes exceeds ",
                     kMaxPathBytes));
  }
  if (path.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError("resource: file path contains NUL");
  }
  if (path[0] == '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "resource: file path \"", path, "\" must be relative to the route"));
  }
  std::vector<absl::string_view> segments = absl::StrSplit(path, '/');
  if (segments.front() == kFileReservedDirectory) {
    return absl::InvalidArgumentError(
        absl::StrCat("resource: \"", kFileReservedDirectory,
                     "/\" is reserved for the route's fence records"));
  }
  for (absl::string_view seg : segments) {
    if (seg.empty() || seg == "." || seg == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat("resource: file path \"", path,
                       "\" has an empty, \".\" or \"..\" segment"));
    }
    if (seg.size() > kMaxNameBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "resource: a file path segment of ", seg.size(),
          " bytes exceeds the file system's limit of ", kMaxNameBytes));
    }
    // Directories too: a directory named like a temporary file would be
    // taken for one by whoever cleans them up.
    if (seg.substr(0, kFileTempPrefix.size()) == kFileTempPrefix) {
      return absl::InvalidArgumentError(
          absl::StrCat("resource: names starting with \"", kFileTempPrefix,
                       "\" are reserved"));
    }
  }
  return absl::OkStatus();
}

namespace {

// A put killed between creating its temporary file and renaming it leaves
// the temporary behind. Client paths cannot name one (the prefix is
// reserved), so every file with the prefix is a leftover of this adapter.
// Best effort: directories that cannot be read (lost+found) are skipped,
// symlinks are neither followed nor removed, and a temporary that cannot be
// removed stays (it is only litter). Returns how many were removed.
int RemoveLeftoverTemporaries(const std::string& root) {
  namespace fs = std::filesystem;
  std::error_code ec;
  int removed = 0;
  fs::recursive_directory_iterator it(
      root, fs::directory_options::skip_permission_denied, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code status_ec;
    const fs::file_status st = it->symlink_status(status_ec);
    if (status_ec || !fs::is_regular_file(st) ||
        !file_io::IsLeftoverTemporary(it->path().filename().string())) {
      continue;
    }
    if (::unlink(it->path().c_str()) == 0) ++removed;
  }
  return removed;
}

}  // namespace

absl::StatusOr<std::unique_ptr<FileAdapter>> FileAdapter::Open(
    const std::string& root) {
  if (root.empty() || root[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("file adapter: root \"", root, "\" must be absolute"));
  }
  // mkdir -p root.
  for (size_t pos = 1; pos <= root.size(); ++pos) {
    if (pos == root.size() || root[pos] == '/') {
      std::string prefix = root.substr(0, pos);
      if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
        return absl::UnavailableError(
            absl::StrCat("file adapter: cannot create root \"", prefix,
                         "\": ", strerror(errno)));
      }
    }
  }
  int fd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat(
        "file adapter: cannot open root \"", root, "\": ", strerror(errno)));
  }
  Fd root_fd(fd);
  Fd probe(OpenBeneath(root_fd.get(), ".", O_RDONLY | O_DIRECTORY));
  if (!probe.valid()) {
    return absl::UnavailableError(absl::StrCat(
        "file adapter: openat2 with RESOLVE_BENEATH is unavailable (",
        strerror(errno), "); Linux 5.6 or later is required"));
  }
  absl::StatusOr<std::unique_ptr<FileFenceRecords>> records =
      FileFenceRecords::Open(root_fd.get(), root);
  if (!records.ok()) return records.status();
  const int removed = RemoveLeftoverTemporaries(root);
  auto adapter = std::unique_ptr<FileAdapter>(
      new FileAdapter(root_fd.release(), root, *std::move(records)));
  adapter->removed_temporaries_ = removed;
  return adapter;
}

FileAdapter::FileAdapter(int root_fd, std::string root,
                         std::unique_ptr<FileFenceRecords> records)
    : root_fd_(root_fd), root_(std::move(root)), records_(std::move(records)) {}

FileAdapter::~FileAdapter() { ::close(root_fd_); }

absl::Status FileAdapter::Validate(const WriteTarget& target,
                                   const Operations& ops) const {
  if (absl::Status s = ValidateFilePath(target.path); !s.ok()) return s;
  for (int i = 0; i < ops.size(); ++i) {
    switch (ops[i].op_case()) {
      case v1::Operation::kPut:
      case v1::Operation::kAppend:
      case v1::Operation::kDelete:
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "ops[", i, "]: the file adapter takes put, append or delete"));
    }
  }
  return absl::OkStatus();
}

absl::Status FileAdapter::Apply(const WriteTarget& target,
                                const Operations& ops, OpResults* results) {
  absl::StatusOr<FileFenceRecords::Held> record =
      records_->Lock(target.domain, target.deadline);
  if (!record.ok()) return record.status();
  if (record->token() > target.token) {
    return StaleTokenError(target.domain, target.token, record->token());
  }
  if (absl::Status s = record->Raise(target.token); !s.ok()) return s;
  FENCEGATE_SYNC_POINT("FileAdapter::Apply:AfterRecord");
  return ApplyOps(target, ops, results);
}

absl::Status FileAdapter::RaiseFence(absl::string_view domain, uint64_t token) {
  absl::StatusOr<FileFenceRecords::Held> record =
      records_->Lock(domain, absl::InfiniteFuture());
  if (!record.ok()) return record.status();
  if (record->token() > token) {
    return StaleTokenError(domain, token, record->token());
  }
  return record->Raise(token);
}

absl::StatusOr<uint64_t> FileAdapter::NextFence(absl::string_view domain,
                                                uint64_t at_least) {
  absl::StatusOr<FileFenceRecords::Held> record =
      records_->Lock(domain, absl::InfiniteFuture());
  if (!record.ok()) return record.status();
  if (record->token() == UINT64_MAX) {
    return absl::OutOfRangeError(absl::StrCat(
        "file adapter: the fence record of a domain is at 2^64-1, no higher "
        "token exists"));
  }
  const uint64_t next = std::max(record->token() + 1, at_least);
  if (absl::Status s = record->Raise(next); !s.ok()) return s;
  return next;
}

absl::Status FileAdapter::ReadFences(
    absl::FunctionRef<void(absl::string_view domain, uint64_t token)> fn) {
  return records_->ReadAll(fn);
}

absl::Status FileAdapter::ApplyOps(const WriteTarget& target,
                                   const Operations& ops, OpResults* results) {
  for (int i = 0; i < ops.size(); ++i) {
    const v1::Operation& op = ops[i];
    v1::FileResult* result = results->Add()->mutable_file();
    absl::Status s;
    switch (op.op_case()) {
      case v1::Operation::kPut:
        s = Put(target.path, op.put().data(), result);
        break;
      case v1::Operation::kAppend:
        s = Append(target.path, op.append().data(), result);
        break;
      case v1::Operation::kDelete:
        s = Delete(target.path, result);
        break;
      default:
        s = absl::InvalidArgumentError("no operation set");
    }
    if (!s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("ops[", i, "] (", i, " of ", ops.size(),
                                       " operations applied): ", s.message()));
    }
  }
  return absl::OkStatus();
}

// Opens the directory `dir` beneath the root, creating missing segments (and
// fsyncing each parent that gained one) when `create` is set.
static absl::StatusOr<Fd> OpenDir(int root_fd, const std::string& dir,
                                  bool create) {
  if (dir.empty()) {
    int fd = ::dup(root_fd);
    if (fd < 0) return ErrnoStatus(errno, "dup root", dir);
    return Fd(fd);
  }
  Fd fd(OpenBeneath(root_fd, dir, O_RDONLY | O_DIRECTORY));
  if (fd.valid()) return fd;
  if (errno != ENOENT || !create)
    return ErrnoStatus(errno, "open directory", dir);
  // Walk down, creating what is missing.
  Fd parent(::dup(root_fd));
  if (!parent.valid()) return ErrnoStatus(errno, "dup root for", dir);
  size_t pos = 0;
  while (true) {
    size_t next = dir.find('/', pos);
    std::string prefix = dir.substr(0, next);
    std::string segment = dir.substr(
        pos, next == std::string::npos ? std::string::npos : next - pos);
    Fd child(OpenBeneath(root_fd, prefix, O_RDONLY | O_DIRECTORY));
    if (!child.valid()) {
      if (errno != ENOENT) return ErrnoStatus(errno, "open directory", prefix);
      if (::mkdirat(parent.get(), segment.c_str(), 0755) != 0 &&
          errno != EEXIST) {
        return ErrnoStatus(errno, "create directory", prefix);
      }
      if (absl::Status s = FsyncFd(parent.get(), "fsync directory", prefix);
          !s.ok()) {
        return s;
      }
      child = Fd(OpenBeneath(root_fd, prefix, O_RDONLY | O_DIRECTORY));
      if (!child.valid()) return ErrnoStatus(errno, "open directory", prefix);
    }
    if (next == std::string::npos) return child;
    parent = std::move(child);
    pos = next + 1;
  }
}

absl::Status FileAdapter::Put(absl::string_view path, const std::string& data,
                              v1::FileResult* result) {
  SplitPath sp = Split(path);
  absl::StatusOr<Fd> dir = OpenDir(root_fd_, sp.dir, /*create=*/true);
  if (!dir.ok()) return dir.status();
  struct stat st;
  result->set_existed(
      ::fstatat(dir->get(), sp.leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0);
  if (result->existed() && S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("file adapter: \"", path, "\" is a directory"));
  }

  std::string tmp;
  Fd file;
  for (int attempt = 0; attempt < 8 && !file.valid(); ++attempt) {
    tmp = TempName();
    file = Fd(::openat(dir->get(), tmp.c_str(),
                       O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                       0644));
    if (!file.valid() && errno != EEXIST) break;
  }
  if (!file.valid()) return ErrnoStatus(errno, "create temporary for", path);
  absl::Status s = WriteAll(file.get(), data, path);
  if (s.ok()) s = FsyncFd(file.get(), "fsync", path);
  file.Reset();
  if (s.ok()) {
    FENCEGATE_SYNC_POINT("FileAdapter::Put:BeforeRename");
    if (::renameat(dir->get(), tmp.c_str(), dir->get(), sp.leaf.c_str()) != 0) {
      s = ErrnoStatus(errno, "rename into place", path);
    }
  }
  if (!s.ok()) {
    ::unlinkat(dir->get(), tmp.c_str(), 0);  // Best effort; reserved name.
    return s;
  }
  if (s = FsyncFd(dir->get(), "fsync directory of", path); !s.ok()) return s;
  result->set_size(data.size());
  result->set_bytes_written(data.size());
  return absl::OkStatus();
}

absl::Status FileAdapter::Append(absl::string_view path,
                                 const std::string& data,
                                 v1::FileResult* result) {
  SplitPath sp = Split(path);
  std::string full(path);
  // O_NONBLOCK so that a FIFO cannot block the open; it is refused below.
  constexpr uint64_t kFlags = O_WRONLY | O_APPEND | O_NONBLOCK;
  Fd file(OpenBeneath(root_fd_, full, kFlags));
  bool created = false;
  if (!file.valid() && errno == ENOENT) {
    absl::StatusOr<Fd> dir = OpenDir(root_fd_, sp.dir, /*create=*/true);
    if (!dir.ok()) return dir.status();
    file = Fd(OpenBeneath(root_fd_, full, kFlags | O_CREAT, 0644));
    created = file.valid();
    if (created) {
      if (absl::Status s = FsyncFd(dir->get(), "fsync directory of", path);
          !s.ok()) {
        return s;
      }
    }
  }
  if (!file.valid()) {
    if (errno == ENXIO) {  // A FIFO without a reader.
      return absl::FailedPreconditionError(
          absl::StrCat("file adapter: \"", path, "\" is not a regular file"));
    }
    return ErrnoStatus(errno, "open for append", path);
  }
  struct stat st;
  if (::fstat(file.get(), &st) != 0) return ErrnoStatus(errno, "stat", path);
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("file adapter: \"", path, "\" is not a regular file"));
  }
  if (::fcntl(file.get(), F_SETFL, O_WRONLY | O_APPEND) != 0) {
    return ErrnoStatus(errno, "fcntl", path);
  }
  // Writers of different domains may append to one file at once; the lock
  // keeps a failed append's rollback from cutting off another's bytes.
  if (::flock(file.get(), LOCK_EX) != 0)
    return ErrnoStatus(errno, "lock", path);
  if (::fstat(file.get(), &st) != 0) return ErrnoStatus(errno, "stat", path);
  result->set_existed(!created);
  absl::Status s = WriteAll(file.get(), data, path);
  if (s.ok()) s = FsyncFd(file.get(), "fsync", path);
  FENCEGATE_SYNC_POINT("FileAdapter::Append:AfterWrite");
  if (!s.ok()) {
    // Leave no torn tail behind: put the file back to its previous size.
    if (::ftruncate(file.get(), st.st_size) == 0) ::fsync(file.get());
    return s;
  }
  result->set_size(static_cast<uint64_t>(st.st_size) + data.size());
  result->set_bytes_written(data.size());
  return absl::OkStatus();  // Closing the descriptor releases the lock.
}

absl::Status FileAdapter::Delete(absl::string_view path,
                                 v1::FileResult* result) {
  SplitPath sp = Split(path);
  absl::StatusOr<Fd> dir = OpenDir(root_fd_, sp.dir, /*create=*/false);
  if (!dir.ok()) {
    // A missing parent, or a parent that is a file: the file cannot exist.
    if (absl::IsNotFound(dir.status()) ||
        absl::IsFailedPrecondition(dir.status())) {
      result->set_existed(false);
      return absl::OkStatus();
    }
    return dir.status();
  }
  if (::unlinkat(dir->get(), sp.leaf.c_str(), 0) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) {
      result->set_existed(false);
      return absl::OkStatus();
    }
    return ErrnoStatus(errno, "delete", path);
  }
  result->set_existed(true);
  return FsyncFd(dir->get(), "fsync directory of", path);
}

absl::Status FileAdapter::Probe() {
  struct stat st;
  if (::fstat(root_fd_, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_nlink == 0) {
    return absl::UnavailableError(
        absl::StrCat("file root ", root_, " is gone"));
  }
  if (::faccessat(root_fd_, ".", W_OK, AT_EACCESS) != 0) {
    return absl::UnavailableError(absl::StrCat(
        "file root ", root_, " is not writable: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace fencegate
