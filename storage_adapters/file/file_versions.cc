// Copyright fencegate authors.

#include "storage_adapters/file/file_versions.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/types/span.h"
#include "storage_adapters/file/checked_slot.h"
#include "storage_adapters/file/fence_records.h"

namespace fencegate {
namespace {

using file_io::ErrnoStatus;
using file_io::Fd;

constexpr char kVersionMagic[] = "fencegate-version 1";
// A version slot with a seq intent.
constexpr char kVersionIntentMagic[] = "fencegate-version 2";
// A domain's own slot, for an intent displaced from the version slots.
constexpr char kKeptMagic[] = "fencegate-seq-kept 1";
constexpr absl::Duration kMaxLockWait = absl::Seconds(30);

// "<domain> <intent>" into `*domain` and `*intent`.
bool ParseDomainIntent(absl::Span<const absl::string_view> fields,
                       std::string* domain, SeqIntent* intent) {
  if (fields.empty() || !IsHexSha256(fields[0]) ||
      !ParseSeqIntent(fields.subspan(1), intent)) {
    return false;
  }
  *domain = std::string(fields[0]);
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<FileVersions>> FileVersions::Open(
    int root_fd, const std::string& root, const FileFenceRecords* records) {
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
  return std::unique_ptr<FileVersions>(
      new FileVersions(std::move(dir), path, records));
}

FileVersions::FileVersions(Fd dir, std::string path,
                           const FileFenceRecords* records)
    : dir_(std::move(dir)), path_(std::move(path)), records_(records) {}

FileVersions::Held::Held(const FileVersions* versions, std::string name,
                         Fd file, std::string where)
    : versions_(versions),
      dir_(versions->dir_.get()),
      name_(std::move(name)),
      file_(std::move(file)),
      where_(std::move(where)) {}

FileVersions::Held::Held(Held&& other) noexcept
    : versions_(other.versions_),
      dir_(other.dir_),
      name_(std::move(other.name_)),
      file_(std::move(other.file_)),
      where_(std::move(other.where_)),
      version_(other.version_),
      slot_(other.slot_),
      slot_intents_{std::move(other.slot_intents_[0]),
                    std::move(other.slot_intents_[1])},
      kept_(std::move(other.kept_)),
      end_(other.end_) {}

FileVersions::Held::~Held() {
  // Still locked: a writer waiting on this file finds it gone once it has
  // the lock (Lock), and opens the path's next one. Best effort: a file
  // left is one more at version 0, as it was before.
  if (file_.valid() && slot_ < 0 && kept_.empty()) {
    ::unlinkat(dir_, name_.c_str(), 0);
  }
}

absl::StatusOr<FileVersions::Held> FileVersions::Lock(
    absl::string_view path, absl::Time deadline) const {
  std::string name = Sha256Hex(path);
  return LockFile(std::move(name),
                  absl::StrCat("\"", absl::CHexEscape(path), "\""), deadline);
}

absl::StatusOr<FileVersions::Held> FileVersions::LockNamed(
    absl::string_view name, absl::Time deadline) const {
  if (!IsHexSha256(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("file adapter: \"", absl::CHexEscape(name),
                     "\" is not the name of a path's version file"));
  }
  return LockFile(std::string(name),
                  absl::StrCat("the path named ", name, " (a domain's home)"),
                  deadline);
}

absl::StatusOr<FileVersions::Held> FileVersions::LockFile(
    std::string name, absl::string_view what, absl::Time deadline) const {
  std::string where = absl::StrCat(path_, "/", name);
  const absl::Time until = std::min(deadline, absl::Now() + kMaxLockWait);
  Fd file;
  struct stat held;
  while (true) {
    file = Fd(file_io::OpenOrCreateAt(dir_.get(), name, O_RDWR, 0644));
    if (!file.valid()) return ErrnoStatus(errno, "open version of", where);
    const absl::Status locked = file_io::LockUntil(file.get(), until, where);
    if (absl::IsDeadlineExceeded(locked)) {
      return absl::UnavailableError(absl::StrCat(
          "file adapter: ", what,
          " stayed locked by another writer (another domain's write to it, "
          "or another gateway process on this root) until the deadline; "
          "nothing was written"));
    }
    if (!locked.ok()) return locked;
    // The holder before may have removed the file (~Held): locked, it must
    // still be the one the name leads to.
    struct stat named;
    if (::fstat(file.get(), &held) != 0) {
      return ErrnoStatus(errno, "stat version of", where);
    }
    if (::fstatat(dir_.get(), name.c_str(), &named, AT_SYMLINK_NOFOLLOW) == 0) {
      if (held.st_ino == named.st_ino && held.st_dev == named.st_dev) break;
    } else if (errno != ENOENT) {
      return ErrnoStatus(errno, "stat version of", where);
    }
  }
  const size_t size = static_cast<size_t>(held.st_size);
  absl::StatusOr<std::string> text =
      file_io::ReadAt(file.get(), 0, size, where);
  if (!text.ok()) return text.status();
  Held out(this, std::move(name), std::move(file), std::move(where));
  out.end_ =
      std::max<uint64_t>(out.end_, (size + kCheckedSlotBytes - 1) /
                                       kCheckedSlotBytes * kCheckedSlotBytes);
  for (size_t at = 0, i = 0; at < text->size(); at += kCheckedSlotBytes, ++i) {
    const absl::string_view bytes =
        absl::string_view(*text).substr(at, kCheckedSlotBytes);
    Held::Kept kept;
    kept.offset = at;
    if (i >= 2) {  // A domain's own slot.
      std::optional<std::string> line = ParseCheckedSlot(bytes, kKeptMagic);
      if (!line.has_value()) continue;
      const std::vector<absl::string_view> fields = absl::StrSplit(*line, ' ');
      if (ParseDomainIntent(fields, &kept.domain, &kept.intent)) {
        out.kept_.push_back(std::move(kept));
      }
      continue;
    }
    uint64_t version = 0;
    std::optional<std::string> line = ParseCheckedSlot(bytes, kVersionMagic);
    if (line.has_value()) {
      if (!absl::SimpleAtoi(*line, &version)) continue;
    } else {
      line = ParseCheckedSlot(bytes, kVersionIntentMagic);
      if (!line.has_value()) continue;
      const std::vector<absl::string_view> fields = absl::StrSplit(*line, ' ');
      if (fields.empty() || !absl::SimpleAtoi(fields[0], &version)) continue;
      // A whole slot's version stands even if its intent does not parse
      // (it cannot, being whole, unless written by another program).
      if (ParseDomainIntent(absl::MakeConstSpan(fields).subspan(1),
                            &kept.domain, &kept.intent)) {
        kept.intent.version = version;
        out.slot_intents_[i] = std::move(kept);
      }
    }
    if (out.slot_ < 0 || version > out.version_) {
      out.version_ = version;
      out.slot_ = static_cast<int>(i);
    }
  }
  return out;
}

SeqIntent FileVersions::Held::IntentOf(absl::string_view domain,
                                       uint64_t record_token) const {
  SeqIntent newest;
  auto consider = [&](const Kept& kept) {
    if (kept.domain == domain && kept.intent.token <= record_token &&
        NewerIntent(kept.intent, newest)) {
      newest = kept.intent;
    }
  };
  for (const std::optional<Kept>& kept : slot_intents_) {
    if (kept.has_value()) consider(*kept);
  }
  for (const Kept& kept : kept_) consider(kept);
  return newest;
}

bool FileVersions::Held::Superseded(const Kept& kept, absl::string_view domain,
                                    const SeqIntent* intent) const {
  auto newer = [&](absl::string_view of, const SeqIntent& other) {
    return of == kept.domain && other.token == kept.intent.token &&
           NewerIntent(other, kept.intent);
  };
  // The raise's own intent only for a retry of the same (token, seq): a
  // raise cut short by a crash leaves its slot failing its checksum, so an
  // intent it overwrites stands only if another copy does.
  if (intent != nullptr && intent->seq == kept.intent.seq &&
      newer(domain, *intent)) {
    return true;
  }
  for (const std::optional<Kept>& other : slot_intents_) {
    if (other.has_value() && newer(other->domain, other->intent)) return true;
  }
  for (const Kept& other : kept_) {
    if (newer(other.domain, other.intent)) return true;
  }
  return false;
}

absl::Status FileVersions::Held::Keep(const Kept& from, uint64_t record_token) {
  // The domain's slot for this token, or one of a token no retry can need.
  auto own = std::find_if(kept_.begin(), kept_.end(), [&](const Kept& k) {
    return k.domain == from.domain && k.intent.token == from.intent.token;
  });
  if (own == kept_.end()) {
    own = std::find_if(kept_.begin(), kept_.end(), [&](const Kept& k) {
      return k.domain == from.domain && k.intent.token < record_token;
    });
  }
  const uint64_t offset = own != kept_.end() ? own->offset : end_;
  // Cut short, the slot fails its checksum; the version slot still holds
  // the intent, since nothing overwrites it before this copy is synced.
  if (absl::Status s = file_io::WriteAllAt(
          file_.get(),
          CheckedSlotText(kKeptMagic, absl::StrCat(from.domain, " ",
                                                   SeqIntentText(from.intent))),
          offset, where_);
      !s.ok()) {
    return s;
  }
  if (::fdatasync(file_.get()) != 0) {
    return ErrnoStatus(errno, "fdatasync", where_);
  }
  if (own != kept_.end()) {
    own->intent = from.intent;
  } else {
    kept_.push_back(Kept{from.domain, from.intent, offset});
    end_ += kCheckedSlotBytes;
  }
  return absl::OkStatus();
}

absl::Status FileVersions::Held::PrepareRaise(absl::string_view domain,
                                              const SeqIntent* intent) {
  if (version_ == UINT64_MAX) {
    return absl::OutOfRangeError(
        absl::StrCat("file adapter: the version of ", where_, " is at 2^64-1"));
  }
  const int slot = slot_ == 0 ? 1 : 0;
  const uint64_t version = version_ + 1;
  std::optional<Kept> with;
  std::string text;
  if (intent != nullptr) {
    with = Kept{std::string(domain), *intent, slot * kCheckedSlotBytes};
    with->intent.version = version;
    with->intent.home.clear();
    text = CheckedSlotText(
        kVersionIntentMagic,
        absl::StrCat(version, " ", domain, " ", SeqIntentText(with->intent)));
  } else {
    text = CheckedSlotText(kVersionMagic, absl::StrCat(version));
  }
  // The intent the raise overwrites, kept first if a retry may need it.
  if (slot_intents_[slot].has_value() &&
      !Superseded(*slot_intents_[slot], domain,
                  with.has_value() ? &with->intent : nullptr)) {
    const Kept& old = *slot_intents_[slot];
    absl::StatusOr<uint64_t> record_token =
        versions_->records_->DurableToken(old.domain);
    if (!record_token.ok()) return record_token.status();
    if (old.intent.token >= *record_token) {
      if (absl::Status s = Keep(old, *record_token); !s.ok()) return s;
    }
  }
  // Cut short, a slot fails its checksum, and the other one stands.
  if (absl::Status s = file_io::WriteAllAt(file_.get(), text,
                                           slot * kCheckedSlotBytes, where_);
      !s.ok()) {
    return s;
  }
  version_ = version;
  slot_ = slot;
  slot_intents_[slot] = std::move(with);
  return absl::OkStatus();
}

}  // namespace fencegate
