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
// SHA-256 of the path in hex: two checked slots (checked_slot.h) at offsets
// 0 and kCheckedSlotBytes, each "fencegate-version 1", "<version>"; the
// whole slot with the higher version holds the path's version, and a raise
// overwrites the other one in place. A path with no whole slot has version
// 0. The file is also the path's lock: flock(LOCK_EX) is held from reading
// the version, through checking a precondition and raising the version, to
// the change made and synced, by every thread and process writing to the
// root, so that no other change of the path comes between (writes of two
// domains to one path included).
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
// continues from it: a root keeps 1 KiB per path it ever changed. One still
// at version 0 when its lock is released (a delete of a missing file, a
// failed precondition, a change that failed before its raise) is removed,
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
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "storage_adapters/file/file_io.h"

namespace fencegate {

class FileVersions {
 public:
  // Creates <root>/.fencegate/versions if missing (beneath `root_fd`, which
  // must stay open while this object lives; FileFenceRecords::Open has
  // made <root>/.fencegate). The errno's status if it cannot be made or
  // opened.
  static absl::StatusOr<std::unique_ptr<FileVersions>> Open(
      int root_fd, const std::string& root);

  // A path's version, its lock held until destroyed.
  class Held {
   public:
    Held(Held&& other) noexcept;
    Held& operator=(Held&&) = delete;
    // Removes the version file if its path is still at version 0 (nothing
    // raised it), then releases the lock.
    ~Held();
    uint64_t version() const { return version_; }
    // Writes version() + 1 to the slot not holding version(), and makes it
    // version(). Not durable until the file system is synced: call it
    // before the change it counts is made. OUT_OF_RANGE at 2^64-1.
    absl::Status PrepareRaise();

   private:
    friend class FileVersions;
    Held(int dir, std::string name, file_io::Fd file, std::string where,
         uint64_t version, int slot);
    int dir_;           // FileVersions::dir_.
    std::string name_;  // The version file's name in dir_.
    file_io::Fd file_;  // The version file, locked; invalid once moved from.
    std::string where_;
    uint64_t version_;
    int slot_;  // The slot holding version_; -1: none.
  };

  // Takes `path`'s lock, waiting for another holder until `deadline` but at
  // most 30 s (then UNAVAILABLE, saying so), and reads its version.
  absl::StatusOr<Held> Lock(absl::string_view path, absl::Time deadline) const;

 private:
  FileVersions(file_io::Fd dir, std::string path);

  const file_io::Fd dir_;   // <root>/.fencegate/versions
  const std::string path_;  // Its path, for messages.
};

}  // namespace fencegate

#endif  // STORAGE_ADAPTERS_FILE_FILE_VERSIONS_H_
