// Copyright fencegate authors.
//
// FileFenceRecords: a file route's fences, kept in its root
// (docs/fencing.md, "The fence in the storage"), so that every gateway
// process writing to the root, and a gateway whose own fence store was lost
// or restored from an older copy, meets them.
//
// Under <root>/.fencegate/fences/ (the file adapter refuses resource paths
// whose first segment is ".fencegate"), per domain, named by the SHA-256 of
// the domain in hex:
//   <hash>       the record, "fencegate-fence 1\n<token>\n<domain>",
//                replaced as a whole: written to a temporary that is synced,
//                renamed over it, and synced again, so that a crash leaves
//                the old record or the new one;
//   <hash>.lock  a file never replaced, locked with flock(LOCK_EX) across
//                reading the record, checking a token, raising the record
//                and the write's file change, by every process (and every
//                thread: each lock opens its own descriptor). It also holds
//                the domain's seq intents (seq_intent.h) that point to
//                where its later ones are kept, in two checked slots
//                (checked_slot.h) at offsets 0 and 512, with the magic
//                "fencegate-seq 1" and the line "<intent> <home>", home
//                being "-" for none; overwritten in place alternately: the
//                one not holding the newest. A slot a crash cut short fails
//                its checksum, and the other holds the intent before. No
//                rename, so an intent is durable with the first sync of the
//                write's group (file_commit.h), and read through the
//                descriptor the lock opened anyway.
// A Write with a seq whose path is its domain's home (the home of the
// newest intent here) keeps its intent beside the path's version only
// (file_versions.h), in the block that write dirties anyway, and writes
// nothing here: a domain's newest intent is the newer of this file's and
// its home's. One to another path, or one that raises no version (a delete
// of a missing file), writes its intent here, with the new home or none.
// A record is raised before the write it admits is applied, so that a crash
// at any point leaves it at least as high as every applied write's token;
// so is a Write's seq intent, so that a crash leaves it recorded if its
// change may have been made.
//
// flock excludes processes of one machine on a local file system. Open
// refuses roots on network and FUSE file systems (NFS, SMB/CIFS, 9p, Ceph,
// AFS, FUSE), where it does not, or may not, hold between machines.
//
// Thread safety: safe for concurrent use.

#ifndef STORAGE_ADAPTERS_FILE_FENCE_RECORDS_H_
#define STORAGE_ADAPTERS_FILE_FENCE_RECORDS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "storage_adapters/file/file_io.h"
#include "storage_adapters/file/seq_intent.h"

namespace fencegate {

// The first path segment reserved for the gateway's own files.
inline constexpr absl::string_view kFileReservedDirectory = ".fencegate";

class FileFenceRecords {
 public:
  // Creates <root>/.fencegate/fences if missing (beneath `root_fd`, which
  // must stay open while this object lives). FAILED_PRECONDITION for a root
  // on a file system where flock does not exclude (above); UNAVAILABLE or
  // the errno's status if the directory cannot be made or opened.
  static absl::StatusOr<std::unique_ptr<FileFenceRecords>> Open(
      int root_fd, const std::string& root);

  // A domain's record, its lock held until destroyed.
  class Held {
   public:
    Held(Held&& other) noexcept;
    Held& operator=(Held&&) = delete;
    // Removes the temporary of a raise prepared and not committed.
    ~Held();
    // The record's token; 0 if the domain has none.
    uint64_t token() const { return token_; }
    // The record's file name: the hex SHA-256 of the domain.
    const std::string& name() const { return name_; }
    // The newest seq intent of this file (seq 0 if none), of a token no
    // higher than token() (an intent of a higher one belongs to a write
    // that never raised the record, so never made its change): compare
    // its token. If it has a home, the home's version file may keep newer
    // ones (above).
    const SeqIntent& intent() const { return intent_; }
    // Replaces the record with `token`, durably, if it is higher than
    // token(); does nothing otherwise.
    absl::Status Raise(uint64_t token);

    // Raise() in two steps, so that the raises of many records share one
    // sync of the file system (file_commit.h):
    //   PrepareRaise writes the new record to a temporary beside it (not
    //     synced; nothing a reader sees changes) if `token` is higher than
    //     token(), and does nothing otherwise;
    //   CommitRaise renames a prepared temporary over the record.
    // The record is durable only once the file system is synced after the
    // temporary was written and again after CommitRaise. Only one raise may
    // be prepared at a time.
    absl::Status PrepareRaise(uint64_t token);
    // Writes `intent` (seq at least 1; its home, if any, a path's name) to
    // the slot not holding intent(), and makes it intent(). Durable once
    // the file system is synced.
    absl::Status PrepareIntent(const SeqIntent& intent);
    bool raise_prepared() const { return !temp_.empty(); }
    absl::Status CommitRaise();

   private:
    friend class FileFenceRecords;
    Held(const FileFenceRecords* records, std::string domain, std::string name,
         file_io::Fd lock, uint64_t token, SeqIntent intent, int intent_slot);
    const FileFenceRecords* records_;
    std::string domain_;
    std::string name_;  // The record's file name.
    file_io::Fd lock_;
    uint64_t token_;
    SeqIntent intent_;
    int intent_slot_;          // The slot holding intent_; -1: none.
    std::string temp_;         // A prepared raise's temporary, or empty.
    uint64_t temp_token_ = 0;  // Its token.
  };

  // Takes the domain's lock, waiting for another holder (another gateway
  // process, say) until `deadline` but at most 30 s (then UNAVAILABLE,
  // saying so, and `*held_elsewhere` set if given), and reads its record.
  // DATA_LOSS for a record that is not one, or is another domain's.
  absl::StatusOr<Held> Lock(absl::string_view domain, absl::Time deadline,
                            bool* held_elsewhere = nullptr) const;

  // The token of the record named `name` (a domain's hex SHA-256; 0 if it
  // has none), without locking, as it is durably: the directory is synced
  // after the read, so that a raise renamed into place before it is too.
  // DATA_LOSS as Lock().
  absl::StatusOr<uint64_t> DurableToken(const std::string& name) const;

  // Calls `fn` with every record's domain and token, without locking (a
  // record is always whole). DATA_LOSS as Lock().
  absl::Status ReadAll(
      absl::FunctionRef<void(absl::string_view domain, uint64_t token)> fn)
      const;

 private:
  FileFenceRecords(file_io::Fd dir, std::string path);
  // Reads the record `name` of `domain` (empty: any domain, returned in
  // `*found`): its token, 0 if there is none.
  absl::StatusOr<uint64_t> Read(const std::string& name,
                                absl::string_view domain,
                                std::string* found) const;

  const file_io::Fd dir_;   // <root>/.fencegate/fences
  const std::string path_;  // Its path, for messages.
};

}  // namespace fencegate

#endif  // STORAGE_ADAPTERS_FILE_FENCE_RECORDS_H_
