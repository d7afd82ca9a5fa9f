// Copyright fencegate authors.

#include "storage_adapters/file/file_adapter.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "boost/asio/post.hpp"
#include "fencegate/common/seq_out_of_order.h"
#include "fencegate/common/stale_token.h"
#include "storage_adapters/file/checked_slot.h"
#include "storage_adapters/file/file_io.h"
#include "storage_adapters/file/seq_intent.h"

namespace fencegate {
namespace {

using file_io::Fd;
using file_io::OpenBeneath;

constexpr size_t kMaxPathBytes = 4096;
// Longest name of one path segment (NAME_MAX on Linux file systems).
constexpr size_t kMaxNameBytes = 255;

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

// Writes are made durable with syncfs (file_commit.h), which reports
// write-back errors only from Linux 5.8.
absl::Status CheckSyncFsReportsErrors() {
  struct utsname name;
  if (::uname(&name) != 0) return absl::OkStatus();
  std::vector<absl::string_view> parts =
      absl::StrSplit(name.release, absl::MaxSplits('.', 2));
  int major = 0;
  int minor = 0;
  if (parts.size() < 2 || !absl::SimpleAtoi(parts[0], &major)) {
    return absl::OkStatus();
  }
  // "8-rc1" and the like: the digits before any suffix.
  const absl::string_view digits = parts[1].substr(
      0, std::min(parts[1].find_first_not_of("0123456789"), parts[1].size()));
  if (!absl::SimpleAtoi(digits, &minor)) return absl::OkStatus();
  if (major > 5 || (major == 5 && minor >= 8)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "file adapter: Linux 5.8 or later is required (this is ", name.release,
      "): before it, syncfs does not report write-back errors, and a write "
      "that did not reach the disk could be answered as durable"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<FileAdapter>> FileAdapter::Open(
    const std::string& root, std::function<void(size_t)> on_group) {
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
  if (absl::Status s = CheckSyncFsReportsErrors(); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<FileFenceRecords>> records =
      FileFenceRecords::Open(root_fd.get(), root);
  if (!records.ok()) return records.status();
  absl::StatusOr<std::unique_ptr<FileVersions>> versions =
      FileVersions::Open(root_fd.get(), root, records->get());
  if (!versions.ok()) return versions.status();
  absl::StatusOr<file_io::Fd> commit_sync =
      file_io::OpenSyncHandle(root_fd.get(), root);
  if (!commit_sync.ok()) return commit_sync.status();
  const int removed = RemoveLeftoverTemporaries(root);
  auto adapter = std::unique_ptr<FileAdapter>(new FileAdapter(
      root_fd.release(), root, *std::move(records), *std::move(versions),
      *std::move(commit_sync), std::move(on_group)));
  adapter->removed_temporaries_ = removed;
  return adapter;
}

FileAdapter::FileAdapter(int root_fd, std::string root,
                         std::unique_ptr<FileFenceRecords> records,
                         std::unique_ptr<FileVersions> versions,
                         file_io::Fd commit_sync,
                         std::function<void(size_t)> on_group)
    : root_fd_(root_fd),
      root_(std::move(root)),
      records_(std::move(records)),
      versions_(std::move(versions)),
      committer_(std::make_unique<FileCommitThread>(
          std::move(commit_sync), root_, std::move(on_group))) {}

FileAdapter::~FileAdapter() {
  stopping_ = true;
  lock_waiters_.join();  // Each gives up within its next try; may commit.
  committer_.reset();    // Commits what is queued; uses the root.
  ::close(root_fd_);
}

FileCommitThread::Counts FileAdapter::commit_counts() const {
  return committer_->counts();
}

absl::Status FileAdapter::Validate(const WriteTarget& target,
                                   const Operations& ops) const {
  if (absl::Status s = ValidateFilePath(target.path); !s.ok()) return s;
  if (target.seq != 0 && ops.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "seq: a file Write with a seq takes one operation, not ", ops.size(),
        " (the operations of one Write are not applied atomically, so a retry "
        "could not be answered as one write)"));
  }
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
    if (ops[i].if_absent() && ops[i].has_if_version()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ops[", i, "]: if_absent and if_version: set at most one"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<FileWrite>> FileAdapter::Begin(
    const WriteTarget& target, const Operations& ops, OpResults* results,
    absl::Time lock_give_up, bool* held_elsewhere) {
  absl::StatusOr<FileFenceRecords::Held> record = records_->Lock(
      target.domain, std::min(target.deadline, lock_give_up), held_elsewhere);
  if (!record.ok()) return record.status();
  if (record->token() > target.token) {
    return StaleTokenError(target.domain, target.token, record->token());
  }
  std::optional<FileVersions::Held> version;
  absl::StatusOr<SeqIntent> last = LastIntent(*record, target, &version);
  if (!last.ok()) return last.status();
  absl::StatusOr<bool> replayed =
      CheckSeq(record->token(), *last, target, ops, results, &version);
  if (!replayed.ok()) return replayed.status();
  if (*replayed) return nullptr;
  auto write = std::make_unique<FileWrite>(*std::move(record));
  if (version.has_value()) write->version.emplace(*std::move(version));
  write->op_count = ops.size();
  if (absl::Status s = write->record.PrepareRaise(target.token); !s.ok()) {
    return s;
  }
  return write;
}

namespace {

// Hex SHA-256 of a Write's path and operation: what a seq names.
std::string RequestHash(absl::string_view path, const v1::Operation& op) {
  return Sha256Hex(
      absl::StrCat(path, std::string(1, '\0'), op.SerializeAsString()));
}

}  // namespace

absl::StatusOr<SeqIntent> FileAdapter::LastIntent(
    const FileFenceRecords::Held& record, const WriteTarget& target,
    std::optional<FileVersions::Held>* version) const {
  const SeqIntent& recorded = record.intent();
  if (record.token() != target.token || recorded.home.empty()) return recorded;
  absl::StatusOr<FileVersions::Held> home =
      versions_->LockNamed(recorded.home, target.deadline);
  if (!home.ok()) return home.status();
  SeqIntent kept = home->IntentOf(record.name(), record.token());
  if (recorded.home == Sha256Hex(target.path))
    version->emplace(*std::move(home));
  return NewerIntent(kept, recorded) ? kept : recorded;
}

absl::StatusOr<bool> FileAdapter::CheckSeq(
    uint64_t record_token, const SeqIntent& last, const WriteTarget& target,
    const Operations& ops, OpResults* results,
    std::optional<FileVersions::Held>* version) {
  if (record_token != target.token || last.token != target.token ||
      last.seq == 0) {
    return false;
  }
  if (target.seq == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "seq: domain \"", absl::CHexEscape(target.domain),
        "\"'s writes with token ", target.token, " carry a seq (the last was ",
        last.seq,
        "): send one, since a write without it could not be told from a retry "
        "on this file route; nothing applied"));
  }
  if (target.seq > last.seq) return false;
  if (target.seq < last.seq) {
    return SeqOutOfOrderError(target.domain, target.token, target.seq,
                              last.seq);
  }
  const v1::Operation& op = ops[0];
  if (RequestHash(target.path, op) != last.request_hash) {
    return absl::FailedPreconditionError(absl::StrCat(
        "seq: seq ", target.seq, " of token ", target.token,
        " was recorded for another write (another path or operation): a seq "
        "names one write; nothing applied"));
  }
  // The path's version tells whether another write changed it since.
  if (!version->has_value()) {
    absl::StatusOr<FileVersions::Held> locked =
        versions_->Lock(target.path, target.deadline);
    if (!locked.ok()) return locked.status();
    version->emplace(*std::move(locked));
  }
  absl::StatusOr<bool> made =
      FileChange::Made(root_fd_, std::string(target.path), op, last.size_before,
                       /*changed_since=*/(*version)->version() > last.version);
  if (!made.ok() || !*made) return made;  // Not made: applied now.
  v1::FileResult* result = results->Add()->mutable_file();
  result->set_existed(last.existed);
  const std::string* data = op.has_put()      ? &op.put().data()
                            : op.has_append() ? &op.append().data()
                                              : nullptr;
  if (data != nullptr) {
    result->set_bytes_written(data->size());
    result->set_size((op.has_append() ? last.size_before : 0) + data->size());
  }
  result->set_version(last.version);
  if (target.replayed != nullptr) *target.replayed = true;
  return true;
}

absl::Status FileAdapter::Prepare(FileWrite& write, const WriteTarget& target,
                                  const Operations& ops, int i,
                                  OpResults* results) {
  write.op_index = i;
  write.change.reset();
  const FileChange::Site site{
      target.resource.empty() ? target.path : target.resource, i, ops.size()};
  std::optional<FileChange::Seq> seq;
  if (target.seq != 0) {
    seq.emplace();
    seq->domain = write.record.name();
    seq->intent.token = target.token;
    seq->intent.seq = target.seq;
    seq->intent.request_hash = RequestHash(target.path, ops[i]);
  }
  std::optional<FileVersions::Held> version;
  if (write.version.has_value()) {
    version.emplace(*std::move(write.version));
    write.version.reset();
  }
  absl::StatusOr<FileChange> change = FileChange::Prepare(
      root_fd_, *versions_, target.deadline, std::string(target.path), site,
      ops[i], results->Add()->mutable_file(), std::move(version),
      seq.has_value() ? &*seq : nullptr);
  if (!change.ok()) return change.status();
  write.change.emplace(*std::move(change));
  if (!seq.has_value()) return absl::OkStatus();
  // Kept beside the version: the domain's lock file names where, unless it
  // already does (fence_records.h).
  std::string home;
  if (write.change->version_raised()) {
    home = Sha256Hex(target.path);
    if (write.record.intent().home == home) return absl::OkStatus();
  }
  SeqIntent intent = std::move(seq->intent);
  intent.size_before = write.change->size_before();
  intent.existed = write.change->existed_before();
  intent.version = write.change->version_after();
  intent.home = std::move(home);
  return write.record.PrepareIntent(intent);
}

absl::Status FileAdapter::Apply(const WriteTarget& target,
                                const Operations& ops, OpResults* results) {
  bool held_elsewhere = false;
  return ApplyUntil(target, ops, results, absl::InfiniteFuture(),
                    &held_elsewhere);
}

absl::Status FileAdapter::ApplyUntil(const WriteTarget& target,
                                     const Operations& ops, OpResults* results,
                                     absl::Time lock_give_up,
                                     bool* held_elsewhere) {
  // Its own sync handle, opened before anything is written (file_io.h).
  absl::StatusOr<file_io::Fd> sync = file_io::OpenSyncHandle(root_fd_, root_);
  if (!sync.ok()) return sync.status();
  absl::StatusOr<std::unique_ptr<FileWrite>> write =
      Begin(target, ops, results, lock_give_up, held_elsewhere);
  if (!write.ok()) return write.status();
  if (*write == nullptr) return absl::OkStatus();  // Replayed.
  FileWrite* const w = write->get();
  // One operation at a time, each a group of its own: the next may depend
  // on it (a put, then an append to the same file).
  for (int i = 0; i < ops.size(); ++i) {
    if (absl::Status s = Prepare(*w, target, ops, i, results); !s.ok()) {
      return s;
    }
    CommitFileWrites(sync->get(), root_, {w});
    if (!w->status.ok()) return w->status;
  }
  return absl::OkStatus();
}

void FileAdapter::ApplyAsync(const WriteTarget& target, const Operations& ops,
                             OpResults* results, ApplyCallback done) {
  // One try at the record's lock here; held by another process, the write
  // waits on a waiter thread instead.
  ApplyAsyncUntil(target, ops, results, done, absl::InfinitePast(),
                  /*last=*/false);
  if (done) {
    boost::asio::post(
        lock_waiters_.get_executor(),
        [this, &target, &ops, results, done = std::move(done)]() mutable {
          WaitThenApply(target, ops, results, std::move(done));
        });
  }
}

void FileAdapter::WaitThenApply(const WriteTarget& target,
                                const Operations& ops, OpResults* results,
                                ApplyCallback done) {
  // As long as a write would wait on the caller's thread (Lock: its
  // deadline, at most 30 s), a try every 100 ms.
  const absl::Time give_up =
      std::min(target.deadline, absl::Now() + absl::Seconds(30));
  while (done) {
    if (stopping_) {
      std::move(done)(absl::UnavailableError(
          "file adapter: the gateway is stopping; nothing was written"));
      return;
    }
    const absl::Time now = absl::Now();
    ApplyAsyncUntil(target, ops, results, done,
                    std::min(give_up, now + absl::Milliseconds(100)),
                    /*last=*/now + absl::Milliseconds(100) >= give_up);
  }
}

void FileAdapter::ApplyAsyncUntil(const WriteTarget& target,
                                  const Operations& ops, OpResults* results,
                                  ApplyCallback& done, absl::Time lock_give_up,
                                  bool last) {
  bool held_elsewhere = false;
  if (ops.size() != 1) {
    absl::Status s =
        ApplyUntil(target, ops, results, lock_give_up, &held_elsewhere);
    if (held_elsewhere && !last) return;  // `done` left to the caller.
    std::move(done)(std::move(s));
    done = nullptr;
    return;
  }
  // For a write committed here rather than by the commit thread, a sync
  // handle of its own, opened before anything is written (file_io.h).
  absl::StatusOr<file_io::Fd> sync = file_io::OpenSyncHandle(root_fd_, root_);
  if (!sync.ok()) {
    std::move(done)(sync.status());
    done = nullptr;
    return;
  }
  absl::StatusOr<std::unique_ptr<FileWrite>> write =
      Begin(target, ops, results, lock_give_up, &held_elsewhere);
  if (held_elsewhere && !last) return;  // `done` left to the caller.
  ApplyCallback finish = std::move(done);
  done = nullptr;
  if (!write.ok() || *write == nullptr) {  // Failed, or replayed.
    std::move(finish)(write.status());
    return;
  }
  if (absl::Status s = Prepare(**write, target, ops, 0, results); !s.ok()) {
    std::move(finish)(s);
    return;
  }
  if (!(*write)->change->groupable()) {
    CommitFileWrites(sync->get(), root_, {write->get()});
    absl::Status s = std::move((*write)->status);
    write->reset();
    std::move(finish)(std::move(s));
    return;
  }
  (*write)->done = std::move(finish);
  committer_->Add(*std::move(write));
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
