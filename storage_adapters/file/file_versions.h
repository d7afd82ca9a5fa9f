// Copyright fencegate authors.
//
// FileVersions: the version of every file path a file route has changed
// (docs/fencing.md, rule 15): a number raised by every change the route
// makes to the path, never lowered, kept across restarts and across a
// delete and re-create of the file. Writes learn it from their results
// (FileResult.version) and make an operation conditional on it
// (Operation.if_version, if_absent).
//
// Under <root>/.fencegate/versions/, one file per path, named by the
// SHA-256 of the path in hex (the path's name): two checked slots
// (checked_slot.h) at offsets 0 and kCheckedSlotBytes, each either
// "fencegate-version 1", "<version>", or "fencegate-version 2",
// "<version> <domain> <intent>" when the change was a Write with a seq of
// the domain whose fence record is named <domain> (seq_intent.h; the
// intent's version is the slot's). The whole slot with the higher version
// holds the path's version, and a raise overwrites the other one in place.
// A path with no whole slot has version 0. The file is also the path's
// lock: flock(LOCK_EX) is held from reading the version, through checking
// a precondition and raising the version, to the change made and synced,
// by every thread and process writing to the root, so that no other change
// of the path comes between (writes of two domains to one path included).
//
// Seq intents kept here (fence_records.h: for the domains whose home this
// path is) outlive the version slot that holds them: before a raise
// overwrites a slot holding a domain's intent, it copies the intent to a
// slot of that domain's own, "fencegate-seq-kept 1", "<domain> <intent>",
// past the two version slots, and syncs it (fdatasync), so that the copy is
// durable before the slot it came from is overwritten. It does not when
// no retry can need the intent: the file holds a newer one of that domain
// and token (the raise's own only if a retry of the same seq, since a raise
// cut short leaves nothing), or its token is below the
// domain's record's (read durably: FileFenceRecords::DurableToken). A
// domain has one own slot per token, reusing one of a token below its
// record's. A domain's intent here is the newest (NewerIntent) of its
// whole slots of a token no higher than its record's (a higher one's write
// never raised the record, so never made its change). A path written by
// one domain with seqs pays no copy; where writes of other domains, or of
// the domain without a seq or under a new token, come between, a raise
// may pay a copy, an fdatasync and a sync of the fence records' directory.
//
// A raise is written before the change it counts is made, and is durable
// with the first sync of the write's group (file_commit.h), before the
// change: a crash leaves the version raised, the change made or not, and
// never a change without its raise. So a version may rise without a change
// (a write that failed or was cut short), never the reverse.
//
// Versions are kept per path as written: a file reached by two paths (a
// symlink or hard link beneath the root) has a version per path. A version
// file stays when its path's file is deleted, so that a re-created file
// continues from it: a root keeps 1 KiB per path it ever changed, and 512
// bytes more per domain and token (usually one or two) whose seq intent
// another write displaced. One still at version 0 when its lock is
// released (a delete of a missing file, a failed precondition, a change
// that failed before its raise) is removed,
// so that writes that change nothing leave nothing behind. A lock taken on
// a file that was removed meanwhile is taken again on the path's current
// one, so that removing it under its lock is safe.
//
// Thread safety: safe for concurrent use; a Held is used by one thread at a
// time.

#ifndef STORAGE_ADAPTERS_FILE_FILE_VERSIONS_H_
#define STORAGE_ADAPTERS_FILE_FILE_VERSIONS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "storage_adapters/file/checked_slot.h"
#include "storage_adapters/file/file_io.h"
#include "storage_adapters/file/seq_intent.h"

namespace fencegate {

class FileFenceRecords;

class FileVersions {
 public:
  // Creates <root>/.fencegate/versions if missing (beneath `root_fd`, which
  // must stay open while this object lives; `records`, the root's fence
  // records, which must too, has made <root>/.fencegate). The errno's
  // status if it cannot be made or opened.
  static absl::StatusOr<std::unique_ptr<FileVersions>> Open(
      int root_fd, const std::string& root, const FileFenceRecords* records);

  // A path's version, its lock held until destroyed.
  class Held {
   public:
    Held(Held&& other) noexcept;
    Held& operator=(Held&&) = delete;
    // Removes the version file if its path is still at version 0 (nothing
    // raised it), then releases the lock.
    ~Held();
    uint64_t version() const { return version_; }
    // The newest seq intent kept here of the domain whose fence record is
    // named `domain`, of a token no higher than `record_token`, its
    // record's (seq 0 if none).
    SeqIntent IntentOf(absl::string_view domain, uint64_t record_token) const;
    // Writes version() + 1 to the slot not holding version(), with
    // `intent` of the domain named `domain` if `intent` is given (its
    // version set to the new one, its home ignored), and makes it
    // version(). Keeps first an intent the raise would overwrite (above).
    // Not durable until the file system is synced: call it before the
    // change it counts is made. OUT_OF_RANGE at 2^64-1.
    absl::Status PrepareRaise(absl::string_view domain = "",
                              const SeqIntent* intent = nullptr);

   private:
    friend class FileVersions;
    // A whole slot holding a seq intent.
    struct Kept {
      std::string domain;
      SeqIntent intent;
      uint64_t offset = 0;
    };
    Held(const FileVersions* versions, std::string name, file_io::Fd file,
         std::string where);
    // Whether the file holds an intent of `kept`'s domain and token newer
    // than it, or `domain`'s `intent` (a raise's) is a retry of it.
    bool Superseded(const Kept& kept, absl::string_view domain,
                    const SeqIntent* intent) const;
    // Copies `from`, a version slot's, to its domain's own slot for its
    // token (reusing one of a token below `record_token`), and syncs the
    // file.
    absl::Status Keep(const Kept& from, uint64_t record_token);

    const FileVersions* versions_;
    int dir_;           // FileVersions::dir_.
    std::string name_;  // The version file's name in dir_.
    file_io::Fd file_;  // The version file, locked; invalid once moved from.
    std::string where_;
    uint64_t version_ = 0;
    int slot_ = -1;  // The slot holding version_; -1: none.
    // The intents of the version slots (by slot) and of the domains' own
    // slots, as last read or written.
    std::optional<Kept> slot_intents_[2];
    std::vector<Kept> kept_;
    uint64_t end_ =
        2 * kCheckedSlotBytes;  // Where a domain's new own slot goes.
  };

  // Takes `path`'s lock, waiting for another holder until `deadline` but at
  // most 30 s (then UNAVAILABLE, saying so), and reads its version and the
  // seq intents kept beside it.
  absl::StatusOr<Held> Lock(absl::string_view path, absl::Time deadline) const;
  // Lock() by the path's name (its hex SHA-256), as a domain's home names it
  // (fence_records.h). INVALID_ARGUMENT for a name that is not one.
  absl::StatusOr<Held> LockNamed(absl::string_view name,
                                 absl::Time deadline) const;

 private:
  FileVersions(file_io::Fd dir, std::string path,
               const FileFenceRecords* records);
  // Lock()'s work, for the file `name`; `what` names it in messages.
  absl::StatusOr<Held> LockFile(std::string name, absl::string_view what,
                                absl::Time deadline) const;

  const file_io::Fd dir_;   // <root>/.fencegate/versions
  const std::string path_;  // Its path, for messages.
  const FileFenceRecords* const records_;
};

}  // namespace fencegate

#endif  // STORAGE_ADAPTERS_FILE_FILE_VERSIONS_H_
