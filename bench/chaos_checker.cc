// Copyright fencegate authors.

#include "bench/chaos_checker.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace fencegate::bench {
namespace {

using Outcome = WriteRecord::Outcome;

// Acknowledged tokens of one scope, by ack time: answers "the highest token
// acknowledged strictly before time t".
class AckTimeline {
 public:
  void Add(int64_t acked_us, uint64_t token) {
    acks_.emplace_back(acked_us, token);
  }
  void Seal() {
    std::sort(acks_.begin(), acks_.end());
    uint64_t highest = 0;
    for (auto& [t, token] : acks_) {
      highest = std::max(highest, token);
      token = highest;  // Now the running maximum up to t.
    }
  }
  uint64_t HighestBefore(int64_t t) const {
    auto it = std::lower_bound(acks_.begin(), acks_.end(),
                               std::make_pair(t, uint64_t{0}));
    if (it == acks_.begin()) return 0;
    return std::prev(it)->second;
  }

 private:
  std::vector<std::pair<int64_t, uint64_t>> acks_;
};

char OutcomeLetter(Outcome o) {
  switch (o) {
    case Outcome::kAcknowledged:
      return 'a';
    case Outcome::kRefusedStale:
      return 's';
    case Outcome::kError:
      return 'e';
  }
  return 'e';
}

}  // namespace

ChaosCounts CheckChaos(const std::vector<WriteRecord>& writes,
                       const std::vector<FenceRecord>& fences,
                       const std::vector<AppliedWrite>& applied) {
  ChaosCounts counts;
  counts.fences = fences.size();
  counts.applied = applied.size();
  // A write's id is shared by its PostgreSQL row and its file line: keyed by
  // (route, id).
  absl::flat_hash_map<std::pair<std::string, int64_t>, const WriteRecord*>
      by_id;
  // Scope of a history: (route, domain); fences count for every route.
  std::map<std::pair<std::string, std::string>, AckTimeline> timelines;
  for (const WriteRecord& w : writes) {
    by_id[{w.route, w.write_id}] = &w;
    switch (w.outcome) {
      case Outcome::kAcknowledged:
        ++counts.acknowledged;
        timelines[{w.route, w.domain}].Add(w.answered_us, w.token);
        break;
      case Outcome::kRefusedStale:
        ++counts.refused_stale;
        break;
      case Outcome::kError:
        ++counts.errors;
        break;
    }
  }
  for (const FenceRecord& f : fences) {
    for (const char* route : {"pg", "file"}) {
      timelines[{route, f.domain}].Add(f.acked_us, f.token);
    }
  }
  for (auto& [scope, timeline] : timelines) timeline.Seal();

  // (route, write_id) -> times applied.
  absl::flat_hash_map<std::pair<std::string, int64_t>, int> seen;
  std::map<std::pair<std::string, std::string>, uint64_t> highest_applied;
  for (const AppliedWrite& a : applied) {
    const int times = ++seen[{a.route, a.write_id}];
    if (times > 1) ++counts.duplicates;
    uint64_t& highest = highest_applied[{a.route, a.domain}];
    bool stale = a.token < highest;
    highest = std::max(highest, a.token);
    auto it = by_id.find(std::make_pair(a.route, a.write_id));
    if (it == by_id.end()) {
      ++counts.unknown_applied;
      if (stale) ++counts.stale_applied;
      continue;
    }
    const WriteRecord& w = *it->second;
    auto tl = timelines.find({a.route, a.domain});
    if (tl != timelines.end() &&
        tl->second.HighestBefore(w.sent_us) > a.token) {
      stale = true;
    }
    if (stale) ++counts.stale_applied;
    if (w.outcome == Outcome::kError && times == 1) {
      ++counts.unacknowledged_landed;
    }
    if (w.outcome == Outcome::kRefusedStale && times == 1) {
      ++counts.refused_landed;
    }
  }
  for (const WriteRecord& w : writes) {
    if (w.outcome == Outcome::kAcknowledged &&
        !seen.contains(std::make_pair(w.route, w.write_id))) {
      ++counts.lost_acknowledged;
    }
  }
  return counts;
}

std::string FormatRecord(const WriteRecord& w) {
  return absl::StrCat("W ", w.route, " ", w.domain, " ", w.write_id, " ",
                      w.token, " ", std::string(1, OutcomeLetter(w.outcome)),
                      " ", w.sent_us, " ", w.answered_us, "\n");
}

std::string FormatRecord(const FenceRecord& f) {
  return absl::StrCat("F ", f.domain, " ", f.token, " ", f.acked_us, "\n");
}

absl::Status ParseRecords(absl::string_view text,
                          std::vector<WriteRecord>* writes,
                          std::vector<FenceRecord>* fences) {
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    if (line.empty()) continue;
    const std::vector<absl::string_view> f =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    auto bad = [&] {
      return absl::InvalidArgumentError(
          absl::StrCat("record line ", line_no, ": \"", line, "\""));
    };
    if (f.empty()) return bad();
    if (f[0] == "W" && f.size() == 8) {
      WriteRecord w;
      w.route = std::string(f[1]);
      w.domain = std::string(f[2]);
      if (!absl::SimpleAtoi(f[3], &w.write_id) ||
          !absl::SimpleAtoi(f[4], &w.token) ||
          !absl::SimpleAtoi(f[6], &w.sent_us) ||
          !absl::SimpleAtoi(f[7], &w.answered_us) || f[5].size() != 1) {
        return bad();
      }
      switch (f[5][0]) {
        case 'a':
          w.outcome = Outcome::kAcknowledged;
          break;
        case 's':
          w.outcome = Outcome::kRefusedStale;
          break;
        case 'e':
          w.outcome = Outcome::kError;
          break;
        default:
          return bad();
      }
      writes->push_back(std::move(w));
    } else if (f[0] == "F" && f.size() == 4) {
      FenceRecord r;
      r.domain = std::string(f[1]);
      if (!absl::SimpleAtoi(f[2], &r.token) ||
          !absl::SimpleAtoi(f[3], &r.acked_us)) {
        return bad();
      }
      fences->push_back(std::move(r));
    } else {
      return bad();
    }
  }
  return absl::OkStatus();
}

}  // namespace fencegate::bench
