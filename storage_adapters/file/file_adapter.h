// Copyright fencegate authors.
//
// FileAdapter: applies put / append / delete to files strictly beneath one
// root directory.
//
// Containment: every path is resolved with openat2(RESOLVE_BENEATH |
// RESOLVE_NO_MAGICLINKS) relative to the root's descriptor, so absolute
// paths, "..", and symlinks that lead out of the root fail in the kernel
// (PERMISSION_DENIED); relative symlinks that stay inside are followed
// (absolute ones are refused, even when they point inside). Paths are
// also checked lexically first (INVALID_ARGUMENT): non-empty, relative, no
// NUL, no empty, "." or ".." segments, at most 4096 bytes.
//
// Durability, before Apply returns OK (file_change.h, file_commit.h):
//   put    - data goes to a temporary file in the target's directory, which
//            is made durable, renamed over the target, and made durable
//            again: a crash leaves the old or the new contents, never a mix.
//   append - written with O_APPEND under flock(LOCK_EX) and made durable; a
//            failed write is truncated back. Only regular files are
//            appended to.
//   delete - unlinked and made durable. A missing file is not an error
//            (existed = false), so retries are safe.
// "Made durable" is a syncfs of the root's file system, through a
// descriptor of the caller's own (syncfs reports an error once per open
// file); a path that leads into another file system mounted beneath the
// root is refused (PERMISSION_DENIED), since that syncfs would miss it.
// ApplyAsync() prepares a write of one operation on the calling thread (its
// record locked and read, a raise and a put's data written to temporaries) and
// hands it to the adapter's commit thread (file_commit_thread.h), which
// makes the writes queued to it durable together: three syncs per group
// of writes rather than two fsyncs per write. Apply(), and ApplyAsync() for
// a write of several operations or a first append to a file, commit on the
// calling thread, one operation at a time.
// Fences: the root keeps its own (fence_records.h), under .fencegate/
// (refused as a resource path, INVALID_ARGUMENT). Apply locks the domain's
// record (flock, waiting for another process until the write's deadline, 30
// s at most), refuses a token below it with the stale-token error (nothing
// applied), raises it durably if the token is higher, and only then applies
// the operations, holding the lock until they are done. So gateway
// processes sharing a root on one machine, or a gateway whose fence store
// was lost, never apply a stale write; RaiseFence, NextFence and ReadFences
// reach the same records.
// Versions: every path's version is kept under .fencegate/ too
// (file_versions.h); each operation takes the path's lock after the
// domain's record, checks its if_absent / if_version there, and raises the
// version before its change is made (file_change.h).
// Linux 5.8 or later is required (openat2; syncfs reporting write-back
// errors).
// Leftovers: a put killed before its rename leaves a temporary file named
// with kFileTempPrefix and its process id. Open removes every such regular
// file beneath the root whose process no longer runs (other gateway
// processes on the same root keep theirs), best effort: unreadable
// directories are skipped and symlinks neither followed nor removed. The
// cost of Open grows with the tree's size.
// A write that fails (ENOSPC, EFBIG, EIO) leaves no partial file: put
// removes its temporary, append truncates back to the previous size.
// Missing parent directories are created by put and append. A path whose
// target is a directory, or crosses a regular file, is FAILED_PRECONDITION.

#ifndef STORAGE_ADAPTERS_FILE_FILE_ADAPTER_H_
#define STORAGE_ADAPTERS_FILE_FILE_ADAPTER_H_

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "fencegate/common/named_thread_pool.h"
#include "storage_adapters/file/fence_records.h"
#include "storage_adapters/file/file_commit.h"
#include "storage_adapters/file/file_commit_thread.h"
#include "storage_adapters/file/file_io.h"
#include "storage_adapters/file/file_versions.h"
#include "storage_adapters/file/presence.h"
#include "storage_adapters/storage_adapter.h"

namespace fencegate {

class FileAdapter final : public StorageAdapter {
 public:
  // Opens (creating if missing) the absolute directory `root`, and removes
  // leftover temporaries beneath it. `on_group`, if set, is told the size
  // of each group the commit thread commits (for a metric); it must not
  // block. INVALID_ARGUMENT for a relative root; UNAVAILABLE if it cannot
  // be opened or the kernel lacks openat2 (Linux 5.6+); FAILED_PRECONDITION
  // before Linux 5.8 and on file systems where the fence records' flock is
  // not sound (fence_records.h).
  static absl::StatusOr<std::unique_ptr<FileAdapter>> Open(
      const std::string& root,
      std::function<void(size_t writes)> on_group = nullptr);

  ~FileAdapter() override;

  absl::Status Validate(const WriteTarget& target,
                        const Operations& ops) const override;
  absl::Status Apply(const WriteTarget& target, const Operations& ops,
                     OpResults* results) override;
  // Blocks for a sync only to keep a seq intent that the write's version
  // raise would overwrite (file_versions.h), and to read a domain's record
  // durably for it (FileFenceRecords::DurableToken); may block for a lock
  // another domain holds (appending to the same file), so
  // ApplyAsyncNeverBlocks() stays false. Never waits on the calling thread
  // for a domain's record that another process holds (another gateway on
  // the root, perhaps paused): such a write waits on one of this root's
  // kLockWaiters threads, trying every 100 ms until its deadline (or the
  // adapter's destruction: UNAVAILABLE), so that the caller's thread, which
  // other domains share, stays free. `done` runs on the commit thread, on a
  // waiter thread, or on this one.
  void ApplyAsync(const WriteTarget& target, const Operations& ops,
                  OpResults* results, ApplyCallback done) override;
  // The root is still a directory the gateway may write to.
  absl::Status Probe() override;
  // Counted by presence files in the root (presence.h).
  absl::StatusOr<int> OtherGateways() override { return presence_.Others(); }

  // The root's fence records (above). Tokens of up to 2^64-1.
  bool KeepsFences() const override { return true; }
  // A Write with a seq (one operation only) records its intent (SeqIntent,
  // seq_intent.h) beside its path's version, and in its domain's lock file
  // if the domain's seq writes move to that path (fence_records.h), durable
  // before its change is made (with the group's first sync, so it costs no
  // sync). A retry of the recorded (token, seq) is answered from the record,
  // replayed, if the file shows the change made (FileChange::Made), and
  // applied again otherwise, ABORTED if another write changed the path
  // since and the file cannot tell (FileChange::Made);
  // a lower seq is SeqOutOfOrderError; the same seq for another path or
  // operation, and a write without a seq for a token that has one recorded, are
  // FAILED_PRECONDITION (either could not be told from a retry).
  bool KeepsSeq() const override { return true; }
  // Every path's version (file_versions.h), in each result; an operation's
  // if_absent or if_version is checked under the path's version lock, with
  // the file as the change finds it, and fails with PreconditionFailedError
  // (common/precondition_failed.h), that operation changing nothing.
  bool KeepsVersions() const override { return true; }
  absl::Status RaiseFence(absl::string_view domain, uint64_t token) override;
  absl::StatusOr<uint64_t> NextFence(absl::string_view domain,
                                     uint64_t at_least) override;
  absl::Status ReadFences(
      absl::FunctionRef<void(absl::string_view domain, uint64_t token)> fn)
      override;

  // Leftover temporaries Open removed.
  int removed_temporaries() const { return removed_temporaries_; }
  // What the commit thread has committed.
  FileCommitThread::Counts commit_counts() const;

 private:
  FileAdapter(int root_fd, std::string root,
              std::unique_ptr<FileFenceRecords> records,
              std::unique_ptr<FileVersions> versions, file_io::Fd commit_sync,
              std::function<void(size_t)> on_group);
  // Locks the domain's record, refuses a token below it, and prepares its
  // raise to the target's token (a Write with a seq: its intent is
  // prepared with its change). Null if the write is a retry answered from
  // the record (its result added to `results`, target.replayed set).
  // Gives up on the record's lock at `lock_give_up`, or at the target's
  // deadline if that is earlier (UNAVAILABLE, nothing done, and
  // `*held_elsewhere` set).
  absl::StatusOr<std::unique_ptr<FileWrite>> Begin(const WriteTarget& target,
                                                   const Operations& ops,
                                                   OpResults* results,
                                                   absl::Time lock_give_up,
                                                   bool* held_elsewhere);
  // Apply() and ApplyAsync()'s work, giving up on the record's lock at
  // `lock_give_up` as Begin does.
  absl::Status ApplyUntil(const WriteTarget& target, const Operations& ops,
                          OpResults* results, absl::Time lock_give_up,
                          bool* held_elsewhere);
  // Calls `done` unless it gave up on a record held elsewhere and `last` is
  // false; then `done` is left as it was, and nothing of the write done.
  void ApplyAsyncUntil(const WriteTarget& target, const Operations& ops,
                       OpResults* results, ApplyCallback& done,
                       absl::Time lock_give_up, bool last);
  // ApplyAsync() of a write whose domain's record another process holds,
  // on a waiter thread.
  void WaitThenApply(const WriteTarget& target, const Operations& ops,
                     OpResults* results, ApplyCallback done);
  // The domain's newest seq intent (fence_records.h): the record's, or a
  // newer one kept beside its home's version. Reads the home only for a
  // write whose token is the record's (no other needs it); holds the home's
  // lock in `*version` if the home is the write's path.
  absl::StatusOr<SeqIntent> LastIntent(
      const FileFenceRecords::Held& record, const WriteTarget& target,
      std::optional<FileVersions::Held>* version) const;
  // The seq rules for a write whose token is the record's, `last` the
  // domain's newest intent: true if the write is a retry of a change
  // already made (answered, as Begin says). A retry takes the path's
  // version lock into `*version` if LastIntent did not.
  absl::StatusOr<bool> CheckSeq(uint64_t record_token, const SeqIntent& last,
                                const WriteTarget& target,
                                const Operations& ops, OpResults* results,
                                std::optional<FileVersions::Held>* version);
  // Prepares ops[i] in `write`, adding its result to `results`.
  absl::Status Prepare(FileWrite& write, const WriteTarget& target,
                       const Operations& ops, int i, OpResults* results);

  const int root_fd_;
  const std::string root_;
  // This gateway's presence in the root, made when first counted.
  FilePresence presence_{
      absl::StrCat(root_, "/", kFileReservedDirectory, "/gateways"),
      GatewayInstanceId()};
  const std::unique_ptr<FileFenceRecords> records_;
  const std::unique_ptr<FileVersions> versions_;
  std::unique_ptr<FileCommitThread> committer_;
  int removed_temporaries_ = 0;
  // The threads where writes wait for a record another process holds.
  static constexpr int kLockWaiters = 4;
  std::atomic<bool> stopping_{false};
  NamedThreadPool lock_waiters_{kLockWaiters, "fg-lock-wait"};
};

// Lexical check of a resource path, as described above.
absl::Status ValidateFilePath(absl::string_view path);

}  // namespace fencegate

#endif  // STORAGE_ADAPTERS_FILE_FILE_ADAPTER_H_
