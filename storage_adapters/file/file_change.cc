// Copyright fencegate authors.

#include "storage_adapters/file/file_change.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "fencegate/common/precondition_failed.h"
#include "fencegate/common/sync_point.h"

namespace fencegate {
namespace {

using file_io::ErrnoStatus;
using file_io::Fd;
using file_io::FsyncFd;
using file_io::OpenBeneath;
using file_io::ReadAt;

// O_NONBLOCK so that a FIFO cannot block the open; it is refused after.
constexpr uint64_t kAppendFlags = O_WRONLY | O_APPEND | O_NONBLOCK;

// `path` split at its last slash: the directory ("" for the root) and the
// last segment.
std::pair<std::string, std::string> Split(absl::string_view path) {
  const size_t slash = path.rfind('/');
  if (slash == absl::string_view::npos) return {"", std::string(path)};
  return {std::string(path.substr(0, slash)),
          std::string(path.substr(slash + 1))};
}

// Opens the directory `dir` beneath the root, creating missing segments (and
// fsyncing each parent that gained one) when `create` is set.
absl::StatusOr<Fd> OpenDir(int root_fd, const std::string& dir, bool create) {
  if (dir.empty()) {
    int fd = ::dup(root_fd);
    if (fd < 0) return ErrnoStatus(errno, "dup root", dir);
    return Fd(fd);
  }
  Fd fd(OpenBeneath(root_fd, dir, O_RDONLY | O_DIRECTORY));
  if (fd.valid()) return fd;
  if (errno != ENOENT || !create) {
    return ErrnoStatus(errno, "open directory", dir);
  }
  // Walk down, creating what is missing.
  Fd parent(::dup(root_fd));
  if (!parent.valid()) return ErrnoStatus(errno, "dup root for", dir);
  size_t pos = 0;
  while (true) {
    const size_t next = dir.find('/', pos);
    const std::string prefix = dir.substr(0, next);
    const std::string segment = dir.substr(
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

absl::Status NotARegularFile(absl::string_view path) {
  return absl::FailedPreconditionError(
      absl::StrCat("file adapter: \"", path, "\" is not a regular file"));
}

}  // namespace

std::string FileChange::Site::Prefix() const {
  return absl::StrCat("ops[", op_index, "] (", op_index, " of ", op_count,
                      " operations applied): ");
}

FileChange::FileChange(Kind kind, int root_fd, std::string path,
                       const Site* site, const v1::Operation* op,
                       const std::string* data, v1::FileResult* result)
    : kind_(kind),
      root_fd_(root_fd),
      path_(std::move(path)),
      site_(site),
      op_(op),
      data_(data),
      result_(result) {}

FileChange::FileChange(FileChange&& other) noexcept
    : kind_(other.kind_),
      root_fd_(other.root_fd_),
      path_(std::move(other.path_)),
      site_(nullptr),
      op_(other.op_),
      data_(other.data_),
      result_(other.result_),
      version_(std::move(other.version_)),
      dir_(std::move(other.dir_)),
      leaf_(std::move(other.leaf_)),
      temp_(std::exchange(other.temp_, std::string())),
      file_(std::move(other.file_)),
      size_before_(other.size_before_),
      delete_found_(other.delete_found_),
      raised_(other.raised_),
      made_(other.made_) {}

FileChange::~FileChange() {
  // Best effort; the name is reserved, and a leftover is removed at the
  // next start.
  if (!temp_.empty() && dir_.valid()) ::unlinkat(dir_.get(), temp_.c_str(), 0);
  // Closing file_ releases an append's lock.
}

absl::StatusOr<FileChange> FileChange::Prepare(
    int root_fd, const FileVersions& versions, absl::Time deadline,
    std::string path, const Site& site, const v1::Operation& op,
    v1::FileResult* result, std::optional<FileVersions::Held> version,
    const Seq* seq) {
  Kind kind;
  const std::string* data = nullptr;
  switch (op.op_case()) {
    case v1::Operation::kPut:
      kind = Kind::kPut;
      data = &op.put().data();
      break;
    case v1::Operation::kAppend:
      kind = Kind::kAppend;
      data = &op.append().data();
      break;
    case v1::Operation::kDelete:
      kind = Kind::kDelete;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          site.Prefix(), "the file adapter takes put, append or delete"));
  }
  FileChange change(kind, root_fd, std::move(path), &site, &op, data, result);
  if (version.has_value()) {
    change.version_.emplace(*std::move(version));
  } else {
    absl::StatusOr<FileVersions::Held> locked =
        versions.Lock(change.path_, deadline);
    if (!locked.ok()) {
      return absl::Status(
          locked.status().code(),
          absl::StrCat(site.Prefix(), locked.status().message()));
    }
    change.version_.emplace(*std::move(locked));
  }
  change.seq_ = seq;
  absl::Status s;
  switch (kind) {
    case Kind::kPut:
      s = change.PreparePut();
      break;
    case Kind::kAppend:
      s = change.PrepareAppend();
      break;
    case Kind::kDelete:
      s = change.PrepareDelete();
      break;
  }
  change.site_ = nullptr;  // Not kept past Prepare.
  change.seq_ = nullptr;
  if (s.ok()) return change;
  // A failed precondition's message has its prefix (Admit).
  if (s.GetPayload(kPreconditionFailedTypeUrl).has_value()) return s;
  return absl::Status(s.code(), absl::StrCat(site.Prefix(), s.message()));
}

absl::Status FileChange::Admit(bool exists) const {
  const bool if_absent = op_->has_if_absent() && op_->if_absent();
  const uint64_t version = version_->version();
  if ((!if_absent || !exists) &&
      (!op_->has_if_version() || op_->if_version() == version)) {
    return absl::OkStatus();
  }
  PreconditionFailedInfo info;
  info.resource = std::string(site_->resource);
  info.op_index = site_->op_index;
  info.expected_absent = if_absent;
  info.expected_version = op_->if_version();
  info.exists = exists;
  info.version = version;
  return PreconditionFailedError(info, site_->Prefix());
}

absl::Status FileChange::RaiseVersion() {
  absl::Status s;
  if (seq_ != nullptr) {
    SeqIntent intent = seq_->intent;
    intent.size_before = size_before();
    intent.existed = existed_before();
    s = version_->PrepareRaise(seq_->domain, &intent);
  } else {
    s = version_->PrepareRaise();
  }
  if (!s.ok()) return s;
  raised_ = true;
  result_->set_version(version_->version());
  return absl::OkStatus();
}

absl::Status FileChange::PreparePut() {
  auto [dir, leaf] = Split(path_);
  absl::StatusOr<Fd> opened = OpenDir(root_fd_, dir, /*create=*/true);
  if (!opened.ok()) return opened.status();
  dir_ = *std::move(opened);
  leaf_ = std::move(leaf);
  struct stat st;
  result_->set_existed(
      ::fstatat(dir_.get(), leaf_.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0);
  if (result_->existed() && S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("file adapter: \"", path_, "\" is a directory"));
  }
  if (absl::Status s = Admit(result_->existed()); !s.ok()) return s;
  std::string temp;
  Fd file;
  for (int attempt = 0; attempt < 8 && !file.valid(); ++attempt) {
    temp = file_io::TempName();
    file = Fd(::openat(dir_.get(), temp.c_str(),
                       O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                       0644));
    if (!file.valid() && errno != EEXIST) break;
  }
  if (!file.valid()) return ErrnoStatus(errno, "create temporary for", path_);
  temp_ = std::move(temp);  // Removed by the destructor if not renamed.
  if (absl::Status s = file_io::WriteAll(file.get(), *data_, path_); !s.ok()) {
    return s;
  }
  return RaiseVersion();
}

absl::Status FileChange::OpenForAppend(bool create) {
  result_->set_existed(true);
  if (create) {
    file_ =
        Fd(OpenBeneath(root_fd_, path_, kAppendFlags | O_CREAT | O_EXCL, 0644));
    if (file_.valid()) result_->set_existed(false);
  }
  if (!file_.valid() && (!create || errno == EEXIST)) {
    file_ = Fd(OpenBeneath(root_fd_, path_, kAppendFlags));
  }
  if (!file_.valid()) {
    if (errno == ENXIO) return NotARegularFile(path_);  // A FIFO, no reader.
    return ErrnoStatus(errno, "open for append", path_);
  }
  struct stat st;
  if (::fstat(file_.get(), &st) != 0) return ErrnoStatus(errno, "stat", path_);
  if (!S_ISREG(st.st_mode)) return NotARegularFile(path_);
  if (::fcntl(file_.get(), F_SETFL, O_WRONLY | O_APPEND) != 0) {
    return ErrnoStatus(errno, "fcntl", path_);
  }
  if (::flock(file_.get(), LOCK_EX) != 0) {
    return ErrnoStatus(errno, "lock", path_);
  }
  if (::fstat(file_.get(), &st) != 0) return ErrnoStatus(errno, "stat", path_);
  size_before_ = st.st_size;
  return absl::OkStatus();
}

absl::Status FileChange::PrepareAppend() {
  absl::Status s = OpenForAppend(/*create=*/false);
  if (s.ok()) {
    if (s = Admit(/*exists=*/true); !s.ok()) return s;
    return RaiseVersion();
  }
  if (!absl::IsNotFound(s)) return s;
  file_.Reset();
  if (s = Admit(/*exists=*/false); !s.ok()) return s;
  // Make() creates the file; its directories are made here.
  absl::StatusOr<Fd> dir = OpenDir(root_fd_, Split(path_).first,
                                   /*create=*/true);
  if (!dir.ok()) return dir.status();
  return RaiseVersion();
}

absl::Status FileChange::PrepareDelete() {
  auto [dir, leaf] = Split(path_);
  leaf_ = std::move(leaf);
  absl::StatusOr<Fd> opened = OpenDir(root_fd_, dir, /*create=*/false);
  if (opened.ok()) {
    dir_ = *std::move(opened);
    struct stat st;
    delete_found_ =
        ::fstatat(dir_.get(), leaf_.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
  } else if (!absl::IsNotFound(opened.status()) &&
             !absl::IsFailedPrecondition(opened.status())) {
    return opened.status();
  }
  // Else a missing parent, or a parent that is a file: the file cannot
  // exist.
  if (absl::Status s = Admit(delete_found_); !s.ok()) return s;
  if (!delete_found_) {
    result_->set_version(version_->version());  // Nothing to change.
    return absl::OkStatus();
  }
  return RaiseVersion();
}

bool FileChange::groupable() const {
  return kind_ != Kind::kAppend || file_.valid();
}

bool FileChange::existed_before() const {
  switch (kind_) {
    case Kind::kPut:
      return result_->existed();
    case Kind::kAppend:
      return file_.valid();
    case Kind::kDelete:
      return delete_found_;
  }
  return false;
}

uint64_t FileChange::size_before() const {
  return kind_ == Kind::kAppend && file_.valid()
             ? static_cast<uint64_t>(size_before_)
             : 0;
}

uint64_t FileChange::version_after() const { return version_->version(); }

namespace {

absl::Status CannotTell(absl::string_view path) {
  return absl::AbortedError(absl::StrCat(
      "file adapter: \"", path,
      "\" changed since this (token, seq) was first tried (another domain's "
      "write to it?): whether that attempt was applied cannot be told; "
      "nothing applied"));
}

}  // namespace

absl::StatusOr<bool> FileChange::Made(int root_fd, const std::string& path,
                                      const v1::Operation& op,
                                      uint64_t size_before,
                                      bool changed_since) {
  absl::StatusOr<bool> made = Found(root_fd, path, op, size_before);
  if (made.ok() && !*made && changed_since) return CannotTell(path);
  return made;
}

absl::StatusOr<bool> FileChange::Found(int root_fd, const std::string& path,
                                       const v1::Operation& op,
                                       uint64_t size_before) {
  switch (op.op_case()) {
    case v1::Operation::kPut: {
      const std::string& data = op.put().data();
      Fd file(OpenBeneath(root_fd, path, O_RDONLY | O_NONBLOCK));
      if (!file.valid()) {
        if (errno == ENOENT || errno == ENOTDIR) return false;
        return ErrnoStatus(errno, "open", path);
      }
      absl::StatusOr<std::string> now =
          ReadAt(file.get(), 0, data.size() + 1, path);
      if (!now.ok()) return now.status();
      return *now == data;
    }
    case v1::Operation::kAppend: {
      const std::string& data = op.append().data();
      Fd file(OpenBeneath(root_fd, path, O_RDWR | O_NONBLOCK));
      if (!file.valid()) {
        if ((errno == ENOENT || errno == ENOTDIR) && size_before == 0) {
          return false;
        }
        if (errno == ENOENT || errno == ENOTDIR) return CannotTell(path);
        return ErrnoStatus(errno, "open", path);
      }
      if (::flock(file.get(), LOCK_EX) != 0) {
        return ErrnoStatus(errno, "lock", path);
      }
      struct stat st;
      if (::fstat(file.get(), &st) != 0)
        return ErrnoStatus(errno, "stat", path);
      const uint64_t size = static_cast<uint64_t>(st.st_size);
      if (size == size_before) return false;
      if (size < size_before) return CannotTell(path);
      absl::StatusOr<std::string> tail =
          ReadAt(file.get(), size_before, data.size(), path);
      if (!tail.ok()) return tail.status();
      if (size >= size_before + data.size()) {
        if (*tail == data) return true;
        return CannotTell(path);
      }
      // Part of it, and nothing after: cut short. Back to where it began.
      if (data.substr(0, tail->size()) != *tail) return CannotTell(path);
      if (::ftruncate(file.get(), static_cast<off_t>(size_before)) != 0) {
        return ErrnoStatus(errno, "truncate", path);
      }
      if (absl::Status s = FsyncFd(file.get(), "fsync", path); !s.ok()) {
        return s;
      }
      return false;
    }
    case v1::Operation::kDelete: {
      struct stat st;
      Fd file(OpenBeneath(root_fd, path, O_PATH | O_NOFOLLOW));
      if (file.valid() && ::fstat(file.get(), &st) == 0) return false;
      if (errno == ENOENT || errno == ENOTDIR) return true;
      return ErrnoStatus(errno, "stat", path);
    }
    default:
      return absl::InvalidArgumentError(
          "the file adapter takes put, append or delete");
  }
}

absl::Status FileChange::Make() {
  made_ = true;
  switch (kind_) {
    case Kind::kPut:
      FENCEGATE_SYNC_POINT("FileAdapter::Put:BeforeRename");
      if (::renameat(dir_.get(), temp_.c_str(), dir_.get(), leaf_.c_str()) !=
          0) {
        return ErrnoStatus(errno, "rename into place", path_);
      }
      temp_.clear();
      result_->set_size(data_->size());
      result_->set_bytes_written(data_->size());
      return absl::OkStatus();
    case Kind::kAppend: {
      if (!file_.valid()) {
        if (absl::Status s = OpenForAppend(/*create=*/true); !s.ok()) return s;
      }
      if (absl::Status s = file_io::WriteAll(file_.get(), *data_, path_);
          !s.ok()) {
        // Leave no torn tail behind.
        if (::ftruncate(file_.get(), size_before_) == 0) ::fsync(file_.get());
        return s;
      }
      FENCEGATE_SYNC_POINT("FileAdapter::Append:AfterWrite");
      result_->set_size(static_cast<uint64_t>(size_before_) + data_->size());
      result_->set_bytes_written(data_->size());
      return absl::OkStatus();
    }
    case Kind::kDelete:
      // Missing when prepared (under the version lock): nothing to change,
      // and the version was not raised.
      if (!dir_.valid() || !delete_found_) {
        result_->set_existed(false);
        return absl::OkStatus();
      }
      if (::unlinkat(dir_.get(), leaf_.c_str(), 0) != 0) {
        if (errno == ENOENT || errno == ENOTDIR) {
          result_->set_existed(false);
          return absl::OkStatus();
        }
        return ErrnoStatus(errno, "delete", path_);
      }
      result_->set_existed(true);
      return absl::OkStatus();
  }
  return absl::InternalError("file adapter: unknown change");
}

void FileChange::Undo() {
  if (made_ && kind_ == Kind::kAppend && file_.valid() &&
      ::ftruncate(file_.get(), size_before_) == 0) {
    ::fsync(file_.get());
  }
}

}  // namespace fencegate
