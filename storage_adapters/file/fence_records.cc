// Copyright fencegate authors.

#include "storage_adapters/file/fence_records.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "fencegate/common/sync_point.h"
#include "storage_adapters/file/checked_slot.h"

namespace fencegate {
namespace {

using file_io::ErrnoStatus;
using file_io::Fd;

constexpr char kRecordMagic[] = "fencegate-fence 1";
// A seq intent slot.
constexpr char kIntentMagic[] = "fencegate-seq 1";
constexpr char kLockSuffix[] = ".lock";
constexpr absl::Duration kMaxLockWait = absl::Seconds(30);
// A record holds at most a domain (512 bytes) and a token; an intent less.
constexpr size_t kMaxRecordBytes = 1024;

// File systems whose flock does not exclude processes of other machines,
// or may not (statfs f_type).
struct UnsoundFs {
  int64_t magic;
  const char* name;
};
constexpr UnsoundFs kUnsound[] = {
    {0x6969, "NFS"},      {0x517B, "SMB"},      {0xFF534D42, "CIFS"},
    {0xFE534D42, "SMB2"}, {0x01021997, "9p"},   {0x00C36400, "Ceph"},
    {0x5346414F, "AFS"},  {0x65735546, "FUSE"},
};

std::string RecordName(absl::string_view domain) { return Sha256Hex(domain); }

absl::Status MkdirBeneath(int dirfd, const char* name, absl::string_view path) {
  if (::mkdirat(dirfd, name, 0755) != 0 && errno != EEXIST) {
    return ErrnoStatus(errno, "create directory", path);
  }
  return absl::OkStatus();
}

// An intent slot's line: "<intent> <home>" (fence_records.h).
std::string IntentLine(const SeqIntent& i) {
  return absl::StrCat(SeqIntentText(i), " ", i.home.empty() ? "-" : i.home);
}

// A slot's text, if whole (checked_slot.h). Slots written before versions
// were kept have no version (0), and before homes were kept no home.
bool ParseIntent(absl::string_view text, SeqIntent* intent) {
  std::optional<std::string> line = ParseCheckedSlot(text, kIntentMagic);
  if (!line.has_value()) return false;
  std::vector<absl::string_view> fields = absl::StrSplit(*line, ' ');
  intent->home.clear();
  if (fields.size() == 7) {
    if (fields[6] != "-") {
      if (!IsHexSha256(fields[6])) return false;
      intent->home = std::string(fields[6]);
    }
    fields.pop_back();
  }
  return ParseSeqIntent(fields, intent);
}

// Up to `limit` bytes of file `name` in `dir`; "" with `*exists` false if
// there is no such file.
absl::StatusOr<std::string> ReadSmall(int dir, const std::string& name,
                                      size_t limit, absl::string_view where,
                                      bool* exists) {
  Fd fd(::openat(dir, name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  *exists = fd.valid();
  if (!fd.valid()) {
    if (errno == ENOENT) return std::string();
    return ErrnoStatus(errno, "open", where);
  }
  return file_io::ReadAt(fd.get(), 0, limit, where);
}

// The newest whole intent of the slots in the lock file `lock`, and its
// slot (-1, and seq 0, if none is whole). Intents of a token above
// `record_token` are passed over: their write never raised the record, so
// it never made its change (file_commit.h).
absl::StatusOr<SeqIntent> ReadIntent(int lock, absl::string_view where,
                                     uint64_t record_token, int* slot) {
  absl::StatusOr<std::string> text =
      file_io::ReadAt(lock, 0, 2 * kCheckedSlotBytes, where);
  if (!text.ok()) return text.status();
  SeqIntent newest;
  *slot = -1;
  for (int i = 0; i < 2; ++i) {
    const size_t at = i * kCheckedSlotBytes;
    SeqIntent read;
    if (text->size() <= at ||
        !ParseIntent(absl::string_view(*text).substr(at, kCheckedSlotBytes),
                     &read) ||
        read.token > record_token) {
      continue;  // Absent, cut short, or never made.
    }
    if (*slot < 0 || NewerIntent(read, newest)) {
      newest = std::move(read);
      *slot = i;
    }
  }
  return newest;
}

}  // namespace

absl::StatusOr<std::unique_ptr<FileFenceRecords>> FileFenceRecords::Open(
    int root_fd, const std::string& root) {
  struct statfs fs;
  if (::fstatfs(root_fd, &fs) == 0) {
    for (const UnsoundFs& unsound : kUnsound) {
      if (static_cast<int64_t>(fs.f_type) == unsound.magic) {
        return absl::FailedPreconditionError(absl::StrCat(
            "file adapter: root \"", root, "\" is on ", unsound.name,
            ", where flock may not exclude another gateway's process: the "
            "fence records kept in the root would not be sound; use a local "
            "file system"));
      }
    }
  }
  const std::string reserved = absl::StrCat(root, "/", kFileReservedDirectory);
  const std::string path = absl::StrCat(reserved, "/fences");
  if (absl::Status s = MkdirBeneath(
          root_fd, std::string(kFileReservedDirectory).c_str(), reserved);
      !s.ok()) {
    return s;
  }
  Fd parent(file_io::OpenBeneath(root_fd, std::string(kFileReservedDirectory),
                                 O_RDONLY | O_DIRECTORY));
  if (!parent.valid()) return ErrnoStatus(errno, "open directory", reserved);
  if (absl::Status s = MkdirBeneath(parent.get(), "fences", path); !s.ok()) {
    return s;
  }
  // Both new directories' entries made durable.
  if (absl::Status s = file_io::FsyncFd(parent.get(), "fsync", reserved);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = file_io::FsyncFd(root_fd, "fsync", root); !s.ok()) {
    return s;
  }
  Fd dir(file_io::OpenBeneath(parent.get(), "fences", O_RDONLY | O_DIRECTORY));
  if (!dir.valid()) return ErrnoStatus(errno, "open directory", path);
  return std::unique_ptr<FileFenceRecords>(
      new FileFenceRecords(std::move(dir), path));
}

FileFenceRecords::FileFenceRecords(Fd dir, std::string path)
    : dir_(std::move(dir)), path_(std::move(path)) {}

FileFenceRecords::Held::Held(const FileFenceRecords* records,
                             std::string domain, std::string name, Fd lock,
                             uint64_t token, SeqIntent intent, int intent_slot)
    : records_(records),
      domain_(std::move(domain)),
      name_(std::move(name)),
      lock_(std::move(lock)),
      token_(token),
      intent_(std::move(intent)),
      intent_slot_(intent_slot) {}

absl::StatusOr<FileFenceRecords::Held> FileFenceRecords::Lock(
    absl::string_view domain, absl::Time deadline, bool* held_elsewhere) const {
  const std::string name = RecordName(domain);
  const std::string lock_name = absl::StrCat(name, kLockSuffix);
  Fd lock(file_io::OpenOrCreateAt(dir_.get(), lock_name, O_RDWR, 0644));
  if (!lock.valid()) {
    return ErrnoStatus(errno, "open fence lock",
                       absl::StrCat(path_, "/", lock_name));
  }
  const absl::Status locked = file_io::LockUntil(
      lock.get(), std::min(deadline, absl::Now() + kMaxLockWait),
      absl::StrCat(path_, "/", lock_name));
  if (absl::IsDeadlineExceeded(locked)) {
    if (held_elsewhere != nullptr) *held_elsewhere = true;
    return absl::UnavailableError(absl::StrCat(
        "file adapter: the fence record of domain \"", absl::CHexEscape(domain),
        "\" stayed locked by another writer (another gateway process on "
        "this root?) until the deadline; nothing was written"));
  }
  if (!locked.ok()) return locked;
  std::string found;
  absl::StatusOr<uint64_t> token = Read(name, domain, &found);
  if (!token.ok()) return token.status();
  int slot = -1;
  absl::StatusOr<SeqIntent> intent = ReadIntent(
      lock.get(), absl::StrCat(path_, "/", lock_name), *token, &slot);
  if (!intent.ok()) return intent.status();
  return Held(this, std::string(domain), name, std::move(lock), *token,
              *std::move(intent), slot);
}

absl::StatusOr<uint64_t> FileFenceRecords::DurableToken(
    const std::string& name) const {
  // A descriptor of this call's own, opened before the read: one shared
  // with another caller could have had a write-back error taken already.
  Fd sync(::openat(dir_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!sync.valid()) return ErrnoStatus(errno, "open directory", path_);
  std::string found;
  absl::StatusOr<uint64_t> token = Read(name, "", &found);
  if (!token.ok()) return token.status();
  // A raise renamed into place and not yet synced is made durable with it.
  if (absl::Status s = file_io::FsyncFd(sync.get(), "fsync", path_); !s.ok()) {
    return s;
  }
  return token;
}

absl::StatusOr<uint64_t> FileFenceRecords::Read(const std::string& name,
                                                absl::string_view domain,
                                                std::string* found) const {
  const std::string where = absl::StrCat(path_, "/", name);
  bool exists = false;
  absl::StatusOr<std::string> read =
      ReadSmall(dir_.get(), name, kMaxRecordBytes + 1, where, &exists);
  if (!read.ok()) return read.status();
  if (!exists) return uint64_t{0};
  const std::string& text = *read;
  const size_t got = text.size();
  std::vector<absl::string_view> parts =
      absl::StrSplit(text, absl::MaxSplits('\n', 2));
  uint64_t token = 0;
  if (got > kMaxRecordBytes || parts.size() != 3 || parts[0] != kRecordMagic ||
      !absl::SimpleAtoi(parts[1], &token) || token == 0 ||
      RecordName(parts[2]) != name || (!domain.empty() && parts[2] != domain)) {
    return absl::DataLossError(absl::StrCat(
        "file adapter: fence record ", where,
        " is not a fence record of its domain; the fence it kept is unknown "
        "(restore it, or remove it knowing that its domain's old holders are "
        "then admitted again)"));
  }
  *found = std::string(parts[2]);
  return token;
}

FileFenceRecords::Held::Held(Held&& other) noexcept
    : records_(other.records_),
      domain_(std::move(other.domain_)),
      name_(std::move(other.name_)),
      lock_(std::move(other.lock_)),
      token_(other.token_),
      intent_(std::move(other.intent_)),
      intent_slot_(other.intent_slot_),
      temp_(std::exchange(other.temp_, std::string())),
      temp_token_(other.temp_token_) {}

FileFenceRecords::Held::~Held() {
  // Best effort: a leftover is also removed at the next start.
  if (!temp_.empty()) ::unlinkat(records_->dir_.get(), temp_.c_str(), 0);
}

absl::Status FileFenceRecords::Held::PrepareRaise(uint64_t token) {
  if (token <= token_) return absl::OkStatus();
  if (!temp_.empty()) {
    return absl::InternalError(
        "file adapter: a fence record raise is "
        "already prepared");
  }
  const int dir = records_->dir_.get();
  std::string temp = file_io::TempName();
  const std::string where = absl::StrCat(records_->path_, "/", name_);
  Fd fd(::openat(dir, temp.c_str(),
                 O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (!fd.valid()) return ErrnoStatus(errno, "create fence record", where);
  if (absl::Status s = file_io::WriteAll(
          fd.get(), absl::StrCat(kRecordMagic, "\n", token, "\n", domain_),
          where);
      !s.ok()) {
    ::unlinkat(dir, temp.c_str(), 0);
    return s;
  }
  temp_ = std::move(temp);
  temp_token_ = token;
  return absl::OkStatus();
}

absl::Status FileFenceRecords::Held::PrepareIntent(const SeqIntent& intent) {
  if (intent.seq == 0) {
    return absl::InternalError("file adapter: a seq intent without a seq");
  }
  const int slot = intent_slot_ == 0 ? 1 : 0;
  // Overwritten in place, at a fixed size, so that the file system
  // allocates and frees nothing: only the block's data changes. Cut short,
  // a slot fails its checksum and the other one stands.
  if (absl::Status s = file_io::WriteAllAt(
          lock_.get(), CheckedSlotText(kIntentMagic, IntentLine(intent)),
          slot * kCheckedSlotBytes,
          absl::StrCat(records_->path_, "/", name_, kLockSuffix));
      !s.ok()) {
    return s;
  }
  intent_ = intent;
  intent_slot_ = slot;
  return absl::OkStatus();
}

absl::Status FileFenceRecords::Held::CommitRaise() {
  if (temp_.empty()) return absl::OkStatus();
  const int dir = records_->dir_.get();
  if (::renameat(dir, temp_.c_str(), dir, name_.c_str()) != 0) {
    return ErrnoStatus(errno, "rename fence record",
                       absl::StrCat(records_->path_, "/", name_));
  }
  temp_.clear();
  token_ = temp_token_;
  FENCEGATE_SYNC_POINT("FileFenceRecords::Raise:AfterRename");
  return absl::OkStatus();
}

absl::Status FileFenceRecords::Held::Raise(uint64_t token) {
  // A sync handle of this raise's own, opened before the temporary is
  // written (file_io.h): the directory's descriptor is shared.
  absl::StatusOr<file_io::Fd> sync =
      file_io::OpenSyncHandle(records_->dir_.get(), records_->path_);
  if (!sync.ok()) return sync.status();
  if (absl::Status s = PrepareRaise(token); !s.ok() || !raise_prepared()) {
    return s;
  }
  if (absl::Status s = file_io::SyncFs(sync->get(), records_->path_); !s.ok()) {
    return s;
  }
  if (absl::Status s = CommitRaise(); !s.ok()) return s;
  return file_io::SyncFs(sync->get(), records_->path_);
}

absl::Status FileFenceRecords::ReadAll(
    absl::FunctionRef<void(absl::string_view domain, uint64_t token)> fn)
    const {
  Fd copy(::openat(dir_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!copy.valid()) return ErrnoStatus(errno, "open directory", path_);
  DIR* listing = ::fdopendir(copy.get());
  if (listing == nullptr) return ErrnoStatus(errno, "list directory", path_);
  copy.release();  // Owned by `listing` now.
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(listing)) {
    const absl::string_view name = entry->d_name;
    if (name.size() == 64 && !absl::StrContains(name, '.')) {
      names.emplace_back(name);
    }
  }
  ::closedir(listing);
  for (const std::string& name : names) {
    std::string domain;
    absl::StatusOr<uint64_t> token = Read(name, "", &domain);
    if (!token.ok()) return token.status();
    if (*token > 0) fn(domain, *token);
  }
  return absl::OkStatus();
}

}  // namespace fencegate
