// Copyright fencegate authors.
//
// FileChange: one put, append or delete of a file beneath the file
// adapter's root, split into the step that changes nothing a reader of the
// root sees (Prepare) and the step that makes the change (Make), so that a
// write's fence record can be raised durably between the two and the
// changes of many writes can share their syncs (file_commit.h).
//
//   put    - Prepare writes the data to a temporary file in the target's
//            directory (creating missing directories, durably) and notes
//            whether the target existed; Make renames it over the target.
//            Synced before Make, a crash leaves the old or the new contents.
//   append - Prepare opens the regular file and takes its flock(LOCK_EX),
//            which it keeps until destroyed, and notes its size; Make writes
//            the data with O_APPEND. Undo truncates it back to that size.
//            The lock keeps the append, and its undo, whole against writers
//            of other domains appending to the same file. To a missing file,
//            Prepare only creates its directories: Make creates the file and
//            waits for its lock, so such a change is not groupable().
//   delete - Make unlinks the file; a missing one is not an error
//            (existed = false), so retries are safe.
// None of them is durable before the file system is synced after Make.
//
// Versions (file_versions.h): Prepare first takes the path's version lock
// (or is handed it), which the change keeps until destroyed; then checks
// the operation's precondition (if_absent, if_version) against the file as
// it finds it, before it writes anything; and last, if the change will
// change the file (all but a delete of a missing file), raises the path's
// version, not yet synced, with the Write's seq intent if it has one. The
// result's version is the one after the change.
//
// Paths are resolved beneath the root (openat2 with RESOLVE_BENEATH), as
// file_adapter.h describes; a path must have passed ValidateFilePath.
//
// Thread safety: a FileChange is used by one thread at a time; it may move
// between threads.

#ifndef STORAGE_ADAPTERS_FILE_FILE_CHANGE_H_
#define STORAGE_ADAPTERS_FILE_FILE_CHANGE_H_

#include <sys/types.h>

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "fencegate/v1/gateway.pb.h"
#include "storage_adapters/file/file_io.h"
#include "storage_adapters/file/file_versions.h"
#include "storage_adapters/file/seq_intent.h"

namespace fencegate {

class FileChange {
 public:
  // Where an operation stands in its Write, for its errors.
  struct Site {
    absl::string_view resource;  // "<route>/<path>".
    int op_index = 0;            // Of op_count operations.
    int op_count = 1;
    // What starts every error's message: "ops[i] (i of n operations
    // applied): ".
    std::string Prefix() const;
  };

  // A Write's seq intent, recorded with the version raise.
  struct Seq {
    std::string domain;  // The name of its domain's fence record.
    SeqIntent intent;    // Its token, seq and request hash; Prepare fills
                         // in the rest.
  };

  // Prepares `op` (put, append or delete) on `path`, to be reported in
  // `result`; `op`, `versions` and `result` must outlive the change; `seq`,
  // if given, only the call. `version` is the path's version lock if the
  // caller holds it already. May block: for the path's version lock (until
  // `deadline`, as FileVersions::Lock) and an append for the file's lock.
  // Errors, their messages starting with `site.Prefix()`: FAILED_PRECONDITION
  // with a PreconditionFailed payload (common/precondition_failed.h) naming
  // `site`'s resource and op_index for a precondition that does not hold;
  // FAILED_PRECONDITION for a put over a directory or an append to something
  // not a regular file, PERMISSION_DENIED for a path leading out of the
  // root, the errno's status (file_io::ErrnoStatus) otherwise. Nothing is
  // left behind but, after a failure past the precondition, a raised
  // version.
  static absl::StatusOr<FileChange> Prepare(
      int root_fd, const FileVersions& versions, absl::Time deadline,
      std::string path, const Site& site, const v1::Operation& op,
      v1::FileResult* result,
      std::optional<FileVersions::Held> version = std::nullopt,
      const Seq* seq = nullptr);

  FileChange(FileChange&& other) noexcept;
  FileChange& operator=(FileChange&&) = delete;
  // Removes a put's temporary if Make() did not rename it; releases an
  // append's lock.
  ~FileChange();

  // Whether Make() never blocks, so that the change can wait in a group:
  // false only for an append to a file that did not exist.
  bool groupable() const;

  // What Prepare found: whether the file existed, and an append's size
  // before it (0 for a missing file, and for a put or delete).
  bool existed_before() const;
  uint64_t size_before() const;
  // The path's version once the change is made.
  uint64_t version_after() const;
  // Whether Prepare raised the version (and recorded the seq intent with
  // it): all but a delete of a missing file.
  bool version_raised() const { return raised_; }

  // Whether `op` on `path`, prepared when the file had `size_before` bytes
  // (an append), was made since, judged by the file as it is now (a
  // Write's seq intent, on a retry: docs/fencing.md, rule 14): a put by
  // the file holding exactly its data; a delete by the file's absence; an
  // append by its data at `size_before`. An append cut short by a crash
  // (part of its data there, nothing after) is truncated back to
  // `size_before`, durably, and is not made. ABORTED if the file changed
  // so that neither can be told (another domain's write to it since): an
  // append's data not where it was to go, or any change not found made
  // when `changed_since` (the path's version is past the one the attempt
  // raised it to: another write may have undone the change). Takes an
  // append's file lock while it looks; the caller holds the path's
  // version lock.
  static absl::StatusOr<bool> Made(int root_fd, const std::string& path,
                                   const v1::Operation& op,
                                   uint64_t size_before, bool changed_since);

  // Makes the change. Not durable until the file system is synced. On error
  // nothing is changed (a put's temporary is removed, a partly written
  // append cut back). Called at most once.
  absl::Status Make();

  // After Make() succeeded and the sync that was to make it durable failed:
  // an append is truncated back to its size before Make() and synced, best
  // effort. A put or delete cannot be taken back and is left as it is.
  void Undo();

 private:
  enum class Kind { kPut, kAppend, kDelete };
  FileChange(Kind kind, int root_fd, std::string path, const Site* site,
             const v1::Operation* op, const std::string* data,
             v1::FileResult* result);

  // Made()'s look at the file, whatever its version.
  static absl::StatusOr<bool> Found(int root_fd, const std::string& path,
                                    const v1::Operation& op,
                                    uint64_t size_before);
  // The precondition of op_, for a file that `exists` or not.
  absl::Status Admit(bool exists) const;
  // Raises the path's version (version_ held) and reports it in result_.
  absl::Status RaiseVersion();

  absl::Status PreparePut();
  absl::Status PrepareAppend();
  absl::Status PrepareDelete();
  absl::Status OpenForAppend(bool create);

  Kind kind_;
  int root_fd_;
  std::string path_;
  const Site* site_;          // Prepare's only.
  const Seq* seq_ = nullptr;  // Prepare's only.
  const v1::Operation* op_;
  const std::string* data_;  // Put and append.
  v1::FileResult* result_;
  std::optional<FileVersions::Held> version_;  // The path's, locked.
  file_io::Fd dir_;            // Put and delete: the target's directory.
  std::string leaf_;           // Put and delete: the target's name in dir_.
  std::string temp_;           // Put: the temporary, until renamed.
  file_io::Fd file_;           // Append: the file, locked.
  off_t size_before_ = 0;      // Append: its size before Make().
  bool delete_found_ = false;  // Delete: the file was there at Prepare.
  bool raised_ = false;
  bool made_ = false;
};

}  // namespace fencegate

#endif  // STORAGE_ADAPTERS_FILE_FILE_CHANGE_H_
