// Copyright fencegate authors.
//
// CommitFileWrites: makes the prepared changes of a group of file writes
// durable, sharing the file system's syncs among them.
//
// Each write holds its domain's fence record locked (a raise perhaps
// prepared, fence_records.h) and one prepared change (file_change.h). The
// group is committed in three steps, each ended by one syncfs of the root's
// file system:
//   1. the temporaries (new records, put data) written by the preparations
//      are made durable;
//   2. each prepared record is renamed over its old one, then synced
//      (skipped when no write raises its record);
//   3. each change is made (renames, unlinks, appends), then synced.
// So every write's record is durable before its change is made, and every
// change is durable before its write is answered: a crash at any point
// leaves each record at least as high as the token of every applied write,
// and each put's file old or new, never a mix. Three syncs serve the whole
// group where a write alone would pay two fsyncs per file.
//
// syncfs flushes every dirty file of the file system, not only the root's:
// a root on a file system of its own syncs fastest.
//
// Errors: a failed sync fails every write still standing in the group (the
// file system is at fault); a failed rename or change fails its own write
// only. A write failed before step 3 changed nothing of its file; one whose
// last sync failed has an append cut back, a put or delete possibly made.

#ifndef STORAGE_ADAPTERS_FILE_FILE_COMMIT_H_
#define STORAGE_ADAPTERS_FILE_FILE_COMMIT_H_

#include <optional>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "storage_adapters/file/fence_records.h"
#include "storage_adapters/file/file_change.h"

namespace fencegate {

// One write's part in a group.
struct FileWrite {
  explicit FileWrite(FileFenceRecords::Held held) : record(std::move(held)) {}

  // The domain's record, locked until the write is destroyed.
  FileFenceRecords::Held record;
  // The path's version lock, if taken before the change was prepared (to
  // read the seq intents kept beside it); handed to the change.
  std::optional<FileVersions::Held> version;
  // The operation to make durable, ops[op_index] of op_count.
  std::optional<FileChange> change;
  int op_index = 0;
  int op_count = 1;
  // The outcome, set by CommitFileWrites.
  absl::Status status;
  // For FileCommitThread: told the outcome.
  absl::AnyInvocable<void(absl::Status) &&> done;
};

// Commits `writes` (each with a change prepared and an OK status) as
// described above, setting each write's status; an operation's error is
// prefixed "ops[i] (i of n operations applied): ". `sync_fd` is the
// caller's own sync handle of the root (file_io::OpenSyncHandle), opened
// before any of the writes' data was written; `root` the root's path, for
// messages. Blocks for the syncs.
void CommitFileWrites(int sync_fd, absl::string_view root,
                      absl::Span<FileWrite* const> writes);

}  // namespace fencegate

#endif  // STORAGE_ADAPTERS_FILE_FILE_COMMIT_H_
