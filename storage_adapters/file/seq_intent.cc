// Copyright fencegate authors.

#include "storage_adapters/file/seq_intent.h"

#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace fencegate {

std::string SeqIntentText(const SeqIntent& i) {
  return absl::StrCat(i.token, " ", i.seq, " ", i.request_hash, " ",
                      i.size_before, " ", i.existed ? 1 : 0, " ", i.version);
}

bool ParseSeqIntent(absl::Span<const absl::string_view> fields,
                    SeqIntent* intent) {
  SeqIntent read;
  if ((fields.size() != 5 && fields.size() != 6) ||
      !absl::SimpleAtoi(fields[0], &read.token) ||
      !absl::SimpleAtoi(fields[1], &read.seq) || read.seq == 0 ||
      fields[2].size() != 64 ||
      !absl::SimpleAtoi(fields[3], &read.size_before) ||
      (fields[4] != "0" && fields[4] != "1") ||
      (fields.size() == 6 && !absl::SimpleAtoi(fields[5], &read.version))) {
    return false;
  }
  read.request_hash = std::string(fields[2]);
  read.existed = fields[4] == "1";
  read.home = std::move(intent->home);
  *intent = std::move(read);
  return true;
}

bool IsHexSha256(absl::string_view text) {
  return text.size() == 64 &&
         text.find_first_not_of("0123456789abcdef") == absl::string_view::npos;
}

bool NewerIntent(const SeqIntent& a, const SeqIntent& b) {
  if (a.seq == 0) return false;
  if (b.seq == 0) return true;
  return std::tie(a.token, a.seq, a.version) >
         std::tie(b.token, b.seq, b.version);
}

}  // namespace fencegate
