// Copyright fencegate authors.
//
// SeqIntentLog: every domain's last Write with a seq (docs/fencing.md, rule
// 14) on one file root, appended to one log shared by every gateway process
// on the root, so that the intents of a commit group dirty a few blocks of
// one file rather than a block of each domain's own file
// (docs/benchmarks.md, "Writes with a seq").
//
// Under <root>/.fencegate/intents/, files "<generation>.log" (20 decimal
// digits). Each record is appended with one write(O_APPEND):
//   "\n" "fencegate-seq 2 <domain hash> <token> <seq> <request hash>
//   <size before> <existed> <version> <SHA-256 of what precedes it>" "\n"
// A record cut short by a crash fails its checksum and is skipped; the
// newline that starts every record keeps the ones after it whole. A
// domain's records are appended under its lock (fence_records.h), so a
// domain's newest is the one with the highest (token, seq): tokens and
// seqs of recorded writes only grow.
//
// Each process keeps every domain's newest intent in memory, read from the
// log as far as it has been written: all of it at Open, then what other
// processes appended since, when a domain is looked up. Durability is the
// caller's: a record is durable once the file system is synced after
// Append (with the first sync of the write's group, file_commit.h).
//
// Compaction: once the newest generation outgrows
// max(Options::compact_bytes, 4 x what its live records take), the process
// that appended last writes the newest record of every domain to the next
// generation (a temporary, fsynced, renamed, the directory fsynced), then
// removes the older generations. Appends hold flock(LOCK_SH) of the
// generation they write to and compaction holds LOCK_EX of it, so no
// record is appended to a generation after it was copied; an appender, or
// a reader, that finds its generation removed moves to the newest. A crash
// mid-way leaves a temporary (removed with the file adapter's leftovers) or
// two generations, both read at Open.
//
// Thread safety: safe for concurrent use. Append and Newest of one domain
// are called with the domain's lock held (FileFenceRecords::Held).

#ifndef STORAGE_ADAPTERS_FILE_SEQ_INTENT_LOG_H_
#define STORAGE_ADAPTERS_FILE_SEQ_INTENT_LOG_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "storage_adapters/file/file_io.h"

namespace fencegate {

// The last Write with a seq recorded for a domain (docs/fencing.md, rule
// 14), durable before its change is made: enough to tell, on a retry,
// whether the change was made, and to answer as it would have been.
struct SeqIntent {
  uint64_t token = 0;
  uint64_t seq = 0;          // 0: none recorded.
  std::string request_hash;  // Hex SHA-256 of the Write's path and op.
  uint64_t size_before = 0;  // An append's file size before it.
  bool existed = false;      // Whether the file existed before the change.
  uint64_t version = 0;      // The file's version after the change.
};

// True if `a` was recorded after `b` (a higher (token, seq)).
bool NewerIntent(const SeqIntent& a, const SeqIntent& b);

class SeqIntentLog {
 public:
  struct Options {
    // The least size of the newest generation that starts a compaction.
    uint64_t compact_bytes = uint64_t{64} << 20;
  };

  // Creates <root>/.fencegate/intents if missing (beneath `reserved_fd`,
  // <root>/.fencegate, which must stay open while this object lives), and
  // reads every generation. The errno's status if it cannot.
  static absl::StatusOr<std::unique_ptr<SeqIntentLog>> Open(
      int reserved_fd, const std::string& root, Options options);

  // The newest intent of the domain whose hash is `domain_hash` (seq 0 if
  // none), after reading what was appended since the last look.
  absl::StatusOr<SeqIntent> Newest(absl::string_view domain_hash);

  // Appends `intent` (seq at least 1) for `domain_hash`; not durable until
  // the file system is synced. May compact (above) after it, blocking
  // other appends of every process on the root meanwhile.
  absl::Status Append(absl::string_view domain_hash, const SeqIntent& intent);

  // The newest generation's number, for tests and operators.
  uint64_t generation() const;

 private:
  SeqIntentLog(file_io::Fd dir, std::string path, Options options);

  // Reads the current generation from where reading stopped to its end,
  // then, if it was removed (compacted), the newest one from its start.
  absl::Status CatchUp() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Opens the newest generation (creating generation 1 if there is none)
  // as the current one, reading it from its start.
  absl::Status OpenNewest() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Parses `text` read from the current generation: whole lines into
  // newest_, a last line without its newline kept in partial_.
  void Absorb(absl::string_view text) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the current generation's file was removed.
  absl::StatusOr<bool> CurrentRemoved() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Compact(), if the current generation has outgrown its bound.
  absl::Status MaybeCompact() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The compaction above, of every generation there is, then OpenNewest().
  // DEADLINE_EXCEEDED if another process holds one of them past `wait`.
  absl::Status Compact(absl::Duration wait) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const file_io::Fd dir_;   // <root>/.fencegate/intents
  const std::string path_;  // Its path, for messages.
  const Options options_;

  mutable absl::Mutex mu_;
  file_io::Fd current_ ABSL_GUARDED_BY(mu_);  // O_RDWR | O_APPEND.
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t read_to_ ABSL_GUARDED_BY(mu_) = 0;  // Offset read up to.
  std::string partial_ ABSL_GUARDED_BY(mu_);
  // The least size of the next compaction, after one that failed.
  uint64_t compact_at_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, SeqIntent> newest_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fencegate

#endif  // STORAGE_ADAPTERS_FILE_SEQ_INTENT_LOG_H_
