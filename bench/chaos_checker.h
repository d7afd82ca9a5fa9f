// Copyright fencegate authors.
//
// The chaos scenario's checker. It works from what the clients recorded --
// every write with its outcome and the times it was sent and answered, and
// every acknowledged Fence -- and from the histories the storage holds, in
// the order they were applied (PostgreSQL rows by sequence, file lines by
// position). One history is one route's writes of one domain.
//
// A write is *stale-applied* if it is in a history and either
//   - a write with a higher token precedes it in that history, or
//   - before it was sent, a higher token of its domain had been
//     acknowledged: a Fence, or a write to the same history.
// Writes that were in flight together with the higher token's ack may land
// either way; only those sent after it must not. A Fence counts for every
// route only when every gateway acknowledged it (the harness fences on all
// gateways, see chaos.h).

#ifndef BENCH_CHAOS_CHECKER_H_
#define BENCH_CHAOS_CHECKER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fencegate::bench {

// One write as its client saw it.
struct WriteRecord {
  enum class Outcome { kAcknowledged, kRefusedStale, kError };
  std::string route;  // "pg" or "file": which history it belongs to.
  std::string domain;
  int64_t write_id = 0;  // Unique over the run.
  uint64_t token = 0;
  Outcome outcome = Outcome::kError;
  int64_t sent_us = 0, answered_us = 0;  // CLOCK_MONOTONIC.
};

// A Fence every gateway acknowledged; `acked_us` is the last ack's time.
struct FenceRecord {
  std::string domain;
  uint64_t token = 0;
  int64_t acked_us = 0;
};

// One write found in the storage, in application order within its
// (route, domain) history.
struct AppliedWrite {
  std::string route, domain;
  uint64_t token = 0;
  int64_t write_id = 0;
};

struct ChaosCounts {
  uint64_t acknowledged = 0;
  uint64_t refused_stale = 0;
  uint64_t errors = 0;
  uint64_t fences = 0;
  uint64_t applied = 0;
  uint64_t lost_acknowledged = 0;
  uint64_t stale_applied = 0;
  uint64_t unacknowledged_landed = 0;
  uint64_t duplicates = 0;
  // Writes refused as stale that were applied all the same.
  uint64_t refused_landed = 0;
  // Applied writes no client recorded (a checker or harness fault).
  uint64_t unknown_applied = 0;
  // Lost, stale, duplicated, refused-but-applied or unknown writes: the run
  // fails. Unacknowledged writes that landed are allowed.
  uint64_t violations() const {
    return lost_acknowledged + stale_applied + duplicates + refused_landed +
           unknown_applied;
  }
};

ChaosCounts CheckChaos(const std::vector<WriteRecord>& writes,
                       const std::vector<FenceRecord>& fences,
                       const std::vector<AppliedWrite>& applied);

// The record lines a worker writes, one per write or acknowledged Fence:
//   W <route> <domain> <write_id> <token> <a|s|e> <sent_us> <answered_us>
//   F <domain> <token> <acked_us>
// Domains hold no whitespace.
std::string FormatRecord(const WriteRecord& w);
std::string FormatRecord(const FenceRecord& f);
// Appends the records of `text` to `writes` and `fences`. INVALID_ARGUMENT
// naming the line for a malformed one.
absl::Status ParseRecords(absl::string_view text,
                          std::vector<WriteRecord>* writes,
                          std::vector<FenceRecord>* fences);

}  // namespace fencegate::bench

#endif  // BENCH_CHAOS_CHECKER_H_
