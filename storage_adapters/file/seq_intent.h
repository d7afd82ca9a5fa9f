// Copyright fencegate authors.
//
// SeqIntent: the last Write with a seq recorded for a domain on a file
// route (docs/fencing.md, rule 14), durable before its change is made:
// enough to tell, on a retry, whether the change was made, and to answer
// as it would have been. Where it is kept: fence_records.h (the domain's
// lock file, when a domain's seq writes move to another path) and
// file_versions.h (beside the version of the path it changed).
//
// Its text, "<token> <seq> <request hash> <size before> <existed>
// <version>", is the same wherever it is kept.

#ifndef STORAGE_ADAPTERS_FILE_SEQ_INTENT_H_
#define STORAGE_ADAPTERS_FILE_SEQ_INTENT_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace fencegate {

struct SeqIntent {
  uint64_t token = 0;
  uint64_t seq = 0;          // 0: none recorded.
  std::string request_hash;  // Hex SHA-256 of the Write's path and op.
  uint64_t size_before = 0;  // An append's file size before it.
  bool existed = false;      // Whether the file existed before the change.
  uint64_t version = 0;      // The path's version after the change.
  // In a domain's lock file only: the name (hex SHA-256) of the path whose
  // version file keeps this domain's later intents (file_versions.h);
  // empty if none does.
  std::string home;
};

// The intent's text (above), without `home`.
std::string SeqIntentText(const SeqIntent& intent);

// Parses the fields of SeqIntentText (5 fields: one written before versions
// were kept, version 0; or 6) into `*intent`, leaving `home` as it is.
// False if they are not an intent with a seq.
bool ParseSeqIntent(absl::Span<const absl::string_view> fields,
                    SeqIntent* intent);

// Whether `text` is a hex SHA-256 (64 lowercase hex digits), as the names
// of records and version files are.
bool IsHexSha256(absl::string_view text);

// Whether `a` was recorded after `b`, of one domain: a higher (token, seq),
// or the same one with a higher version, as a retry of a write that was not
// made records it again, at the next version of its path. A recorded
// intent is newer than none (seq 0).
bool NewerIntent(const SeqIntent& a, const SeqIntent& b);

}  // namespace fencegate

#endif  // STORAGE_ADAPTERS_FILE_SEQ_INTENT_H_
