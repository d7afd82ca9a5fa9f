// Copyright fencegate authors.

#include "storage_adapters/file/seq_intent_log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "fencegate/common/sync_point.h"
#include "storage_adapters/file/checked_slot.h"

namespace fencegate {
namespace {

using file_io::ErrnoStatus;
using file_io::Fd;

constexpr char kRecordMagic[] = "fencegate-seq 2";
constexpr char kSuffix[] = ".log";
constexpr size_t kGenerationDigits = 20;
// About what one record takes, to bound a compacted generation's growth.
constexpr uint64_t kRecordBytes = 320;
constexpr size_t kReadChunk = size_t{1} << 20;
constexpr uint64_t kPreallocateBytes = uint64_t{4} << 20;
// How long an append waits for another process's compaction, and a
// compaction for other processes' appends.
constexpr absl::Duration kMaxAppendWait = absl::Seconds(30);
constexpr absl::Duration kMaxCompactWait = absl::Seconds(5);
constexpr absl::Duration kMaxOpenCompactWait = absl::Seconds(30);

std::string GenerationName(uint64_t generation) {
  return absl::StrFormat("%020d%s", generation, kSuffix);
}

// The generation a file name stands for, or 0 for another name.
uint64_t GenerationOf(absl::string_view name) {
  uint64_t generation = 0;
  if (!absl::ConsumeSuffix(&name, kSuffix) ||
      name.size() != kGenerationDigits ||
      !absl::SimpleAtoi(name, &generation)) {
    return 0;
  }
  return generation;
}

// A record's bytes (the header describes them).
std::string RecordText(absl::string_view domain_hash, const SeqIntent& i) {
  const std::string line =
      absl::StrCat(kRecordMagic, " ", domain_hash, " ", i.token, " ", i.seq,
                   " ", i.request_hash, " ", i.size_before, " ",
                   i.existed ? 1 : 0, " ", i.version);
  return absl::StrCat("\n", line, " ", Sha256Hex(line), "\n");
}

// A record's line (without its newlines), if whole.
bool ParseRecord(absl::string_view line, std::string* domain_hash,
                 SeqIntent* intent) {
  const size_t last = line.rfind(' ');
  if (last == absl::string_view::npos ||
      Sha256Hex(line.substr(0, last)) != line.substr(last + 1)) {
    return false;
  }
  std::vector<absl::string_view> fields =
      absl::StrSplit(line.substr(0, last), ' ');
  // "fencegate-seq" "2" and seven fields.
  if (fields.size() != 9 || fields[0] != "fencegate-seq" || fields[1] != "2" ||
      fields[2].size() != 64 || !absl::SimpleAtoi(fields[3], &intent->token) ||
      !absl::SimpleAtoi(fields[4], &intent->seq) || intent->seq == 0 ||
      fields[5].size() != 64 ||
      !absl::SimpleAtoi(fields[6], &intent->size_before) ||
      (fields[7] != "0" && fields[7] != "1") ||
      !absl::SimpleAtoi(fields[8], &intent->version)) {
    return false;
  }
  *domain_hash = std::string(fields[2]);
  intent->request_hash = std::string(fields[5]);
  intent->existed = fields[7] == "1";
  return true;
}

// The generations in `dir`, lowest first.
absl::StatusOr<std::vector<uint64_t>> ListGenerations(int dir,
                                                      absl::string_view path) {
  Fd copy(::openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!copy.valid()) return ErrnoStatus(errno, "open directory", path);
  DIR* listing = ::fdopendir(copy.get());
  if (listing == nullptr) return ErrnoStatus(errno, "list directory", path);
  copy.release();  // Owned by `listing` now.
  std::vector<uint64_t> generations;
  while (const dirent* entry = ::readdir(listing)) {
    if (uint64_t g = GenerationOf(entry->d_name); g > 0) {
      generations.push_back(g);
    }
  }
  ::closedir(listing);
  std::sort(generations.begin(), generations.end());
  return generations;
}

}  // namespace

bool NewerIntent(const SeqIntent& a, const SeqIntent& b) {
  return std::make_pair(a.token, a.seq) > std::make_pair(b.token, b.seq);
}

absl::StatusOr<std::unique_ptr<SeqIntentLog>> SeqIntentLog::Open(
    int reserved_fd, const std::string& root, Options options) {
  const std::string path = absl::StrCat(root, "/.fencegate/intents");
  if (::mkdirat(reserved_fd, "intents", 0755) == 0) {
    // The new directory's entry made durable.
    if (absl::Status s = file_io::FsyncFd(reserved_fd, "fsync", path);
        !s.ok()) {
      return s;
    }
  } else if (errno != EEXIST) {
    return ErrnoStatus(errno, "create directory", path);
  }
  Fd dir(file_io::OpenBeneath(reserved_fd, "intents", O_RDONLY | O_DIRECTORY));
  if (!dir.valid()) return ErrnoStatus(errno, "open directory", path);
  std::unique_ptr<SeqIntentLog> log(
      new SeqIntentLog(std::move(dir), path, options));
  absl::MutexLock lock(&log->mu_);
  absl::StatusOr<std::vector<uint64_t>> generations =
      ListGenerations(log->dir_.get(), path);
  if (!generations.ok()) return generations.status();
  if (generations->size() > 1) {
    // A compaction was cut short (or is under way): finished first, so that
    // every process appends to one generation. Until then, processes that
    // were running go on appending to the older one.
    absl::Status s = log->Compact(kMaxOpenCompactWait);
    if (absl::IsDeadlineExceeded(s)) {
      return absl::UnavailableError(absl::StrCat(
          "file adapter: the seq intent log ", path,
          " has several generations and another gateway process held them "
          "until the deadline; try again"));
    }
    if (!s.ok()) return s;
    return log;
  }
  if (absl::Status s = log->OpenNewest(); !s.ok()) return s;
  return log;
}

SeqIntentLog::SeqIntentLog(Fd dir, std::string path, Options options)
    : dir_(std::move(dir)), path_(std::move(path)), options_(options) {}

uint64_t SeqIntentLog::generation() const {
  absl::MutexLock lock(&mu_);
  return generation_;
}

absl::Status SeqIntentLog::OpenNewest() {
  for (int attempt = 0;; ++attempt) {
    absl::StatusOr<std::vector<uint64_t>> generations =
        ListGenerations(dir_.get(), path_);
    if (!generations.ok()) return generations.status();
    const uint64_t newest = generations->empty() ? 1 : generations->back();
    const std::string name = GenerationName(newest);
    const int flags = O_RDWR | O_APPEND | O_CLOEXEC | O_NOFOLLOW;
    Fd fd(generations->empty()
              ? file_io::OpenOrCreateAt(dir_.get(), name, flags, 0644)
              : ::openat(dir_.get(), name.c_str(), flags));
    if (!fd.valid()) {
      // Removed by a compaction between the listing and the open.
      if (errno == ENOENT && attempt < 100) continue;
      return ErrnoStatus(errno, "open", absl::StrCat(path_, "/", name));
    }
    if (generations->empty()) {
      if (absl::Status s = file_io::FsyncFd(dir_.get(), "fsync", path_);
          !s.ok()) {
        return s;
      }
    }
    current_ = std::move(fd);
    generation_ = newest;
    read_to_ = 0;
    partial_.clear();
    return CatchUp();
  }
}

absl::StatusOr<bool> SeqIntentLog::CurrentRemoved() const {
  struct stat st;
  if (::fstat(current_.get(), &st) != 0) {
    return ErrnoStatus(errno, "stat", path_);
  }
  return st.st_nlink == 0;
}

void SeqIntentLog::Absorb(absl::string_view text) {
  partial_.append(text.data(), text.size());
  const size_t end = partial_.rfind('\n');
  if (end == std::string::npos) return;
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(partial_).substr(0, end), '\n')) {
    std::string domain_hash;
    SeqIntent intent;
    // Empty (a record's leading newline), or cut short: skipped.
    if (line.empty() || !ParseRecord(line, &domain_hash, &intent)) continue;
    auto [it, added] = newest_.try_emplace(domain_hash, intent);
    if (!added && NewerIntent(intent, it->second)) it->second = intent;
  }
  partial_.erase(0, end + 1);
}

absl::Status SeqIntentLog::CatchUp() {
  struct stat st;
  if (::fstat(current_.get(), &st) != 0) {
    return ErrnoStatus(errno, "stat", path_);
  }
  // Compacted: the newest generation holds all of it, and more.
  if (st.st_nlink == 0) return OpenNewest();
  // What was appended after the size was taken is other domains' (each
  // appends under its own lock).
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  while (read_to_ < size) {
    absl::StatusOr<std::string> text =
        file_io::ReadAt(current_.get(), read_to_,
                        std::min<uint64_t>(size - read_to_, kReadChunk), path_);
    if (!text.ok()) return text.status();
    if (text->empty()) break;  // Cut back meanwhile (not by the gateway).
    read_to_ += text->size();
    Absorb(*text);
  }
  return absl::OkStatus();
}

absl::StatusOr<SeqIntent> SeqIntentLog::Newest(absl::string_view domain_hash) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CatchUp(); !s.ok()) return s;
  auto it = newest_.find(domain_hash);
  return it == newest_.end() ? SeqIntent{} : it->second;
}

absl::Status SeqIntentLog::Append(absl::string_view domain_hash,
                                  const SeqIntent& intent) {
  if (intent.seq == 0) {
    return absl::InternalError("file adapter: a seq intent without a seq");
  }
  const std::string record = RecordText(domain_hash, intent);
  absl::MutexLock lock(&mu_);
  const absl::Time give_up = absl::Now() + kMaxAppendWait;
  while (true) {
    absl::Status locked =
        file_io::LockUntil(current_.get(), give_up, path_, LOCK_SH);
    if (absl::IsDeadlineExceeded(locked)) {
      return absl::UnavailableError(absl::StrCat(
          "file adapter: the seq intent log ", path_,
          " stayed locked by another gateway process's compaction until "
          "the deadline; nothing was written"));
    }
    if (!locked.ok()) return locked;
    absl::StatusOr<bool> removed = CurrentRemoved();
    if (removed.ok() && !*removed) break;
    ::flock(current_.get(), LOCK_UN);
    if (!removed.ok()) return removed.status();
    if (absl::Status s = CatchUp(); !s.ok()) return s;
  }
  // One write, whole or failed: a second write to finish a short one could
  // land after another process's record (O_APPEND).
  ssize_t n;
  do {
    n = ::write(current_.get(), record.data(), record.size());
  } while (n < 0 && errno == EINTR);
  const int err = errno;
  ::flock(current_.get(), LOCK_UN);
  if (n != static_cast<ssize_t>(record.size())) {
    // What was written is cut short: it fails its checksum.
    return n < 0 ? ErrnoStatus(err, "append to", path_)
                 : absl::ResourceExhaustedError(absl::StrCat(
                       "file adapter: a seq intent was cut short appending "
                       "to ",
                       path_, " (the file system is full?)"));
  }
  auto [it, added] = newest_.try_emplace(std::string(domain_hash), intent);
  if (!added && NewerIntent(intent, it->second)) it->second = intent;
  FENCEGATE_SYNC_POINT("SeqIntentLog::Append:AfterWrite");
  // A compaction that fails loses nothing: the generation stays, and it is
  // tried again once it has grown by another bound.
  (void)MaybeCompact();
  return absl::OkStatus();
}

absl::Status SeqIntentLog::MaybeCompact() {
  struct stat st;
  if (::fstat(current_.get(), &st) != 0) {
    return ErrnoStatus(errno, "stat", path_);
  }
  const uint64_t bound = std::max(
      {options_.compact_bytes, 4 * kRecordBytes * newest_.size(), compact_at_});
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  // Blocks allocated ahead of the appends (the size unchanged), so that a
  // group's sync writes into them rather than allocating its own.
  const uint64_t allocated = static_cast<uint64_t>(st.st_blocks) * 512;
  if (allocated < size + kPreallocateBytes / 2) {
    (void)::fallocate(current_.get(), FALLOC_FL_KEEP_SIZE,
                      static_cast<off_t>(size),
                      static_cast<off_t>(kPreallocateBytes));
  }
  if (size < bound) return absl::OkStatus();
  // Until this one succeeds, the next is tried one bound further on.
  compact_at_ = size + options_.compact_bytes;
  return Compact(kMaxCompactWait);
}

absl::Status SeqIntentLog::Compact(absl::Duration wait) {
  absl::StatusOr<std::vector<uint64_t>> generations =
      ListGenerations(dir_.get(), path_);
  if (!generations.ok()) return generations.status();
  // Every generation locked, lowest first (so that two compactions cannot
  // wait for each other), each with a descriptor of its own: LOCK_EX
  // excludes this process's appends too.
  const absl::Time give_up = absl::Now() + wait;
  std::vector<std::pair<uint64_t, Fd>> held;
  for (uint64_t g : *generations) {
    const std::string name = GenerationName(g);
    Fd fd(
        ::openat(dir_.get(), name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd.valid()) {
      if (errno == ENOENT) continue;  // Compacted meanwhile.
      return ErrnoStatus(errno, "open", absl::StrCat(path_, "/", name));
    }
    if (absl::Status s = file_io::LockUntil(fd.get(), give_up, path_, LOCK_EX);
        !s.ok()) {
      return s;
    }
    struct stat st;
    if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, "stat", path_);
    if (st.st_nlink == 0) continue;  // Compacted meanwhile.
    held.emplace_back(g, std::move(fd));
  }
  absl::StatusOr<std::vector<uint64_t>> now =
      ListGenerations(dir_.get(), path_);
  if (!now.ok()) return now.status();
  if (held.empty() || now->empty() || now->back() != held.back().first) {
    return OpenNewest();  // Another process compacted them first.
  }
  // Every append to them is over: read them all.
  for (const auto& [g, fd] : held) {
    partial_.clear();
    for (uint64_t at = 0;;) {
      absl::StatusOr<std::string> text =
          file_io::ReadAt(fd.get(), at, kReadChunk, path_);
      if (!text.ok()) return text.status();
      if (text->empty()) break;
      at += text->size();
      Absorb(*text);
    }
  }
  partial_.clear();
  FENCEGATE_SYNC_POINT("SeqIntentLog::Compact:AfterRead");
  std::string text;
  text.reserve(newest_.size() * kRecordBytes);
  for (const auto& [domain_hash, intent] : newest_) {
    text += RecordText(domain_hash, intent);
  }
  const std::string temp = file_io::TempName();
  const std::string next = GenerationName(held.back().first + 1);
  Fd out(::openat(dir_.get(), temp.c_str(),
                  O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (!out.valid()) return ErrnoStatus(errno, "create temporary in", path_);
  absl::Status s = file_io::WriteAll(out.get(), text, path_);
  if (s.ok()) s = file_io::FsyncFd(out.get(), "fsync", path_);
  if (s.ok() &&
      ::renameat(dir_.get(), temp.c_str(), dir_.get(), next.c_str()) != 0) {
    s = ErrnoStatus(errno, "rename", absl::StrCat(path_, "/", next));
  }
  if (!s.ok()) {
    ::unlinkat(dir_.get(), temp.c_str(), 0);
    return s;
  }
  // The next generation durable before the ones it replaces go.
  if (absl::Status s = file_io::FsyncFd(dir_.get(), "fsync", path_); !s.ok()) {
    return s;
  }
  for (const auto& [g, fd] : held) {
    ::unlinkat(dir_.get(), GenerationName(g).c_str(), 0);
  }
  compact_at_ = 0;
  // This process moves to the next generation now, others when they find
  // theirs removed; the locks are released after.
  return OpenNewest();
}

}  // namespace fencegate
