// Copyright fencegate authors.

#include "pgport/session_sql_cache.h"

namespace fencegate::pgport {

absl::StatusOr<std::vector<postgres::SessionStatement>>
SessionSqlCache::Classify(absl::string_view sql) {
  if (sql.size() > max_text_bytes_) return postgres::ClassifySessionSql(sql);
  auto it = entries_.find(sql);
  if (it == entries_.end()) {
    if (entries_.size() >= max_entries_) entries_.clear();
    Entry entry;
    absl::StatusOr<std::vector<postgres::SessionStatement>> parsed =
        postgres::ClassifySessionSql(sql);
    if (!parsed.ok()) {
      entry.error = parsed.status();
    } else {
      for (postgres::SessionStatement& s : *parsed) {
        entry.spans.emplace_back(
            static_cast<size_t>(s.text.data() - sql.data()), s.text.size());
        s.text = {};
        entry.statements.push_back(std::move(s));
      }
    }
    it = entries_.emplace(std::string(sql), std::move(entry)).first;
  }
  const Entry& entry = it->second;
  if (!entry.error.ok()) return entry.error;
  std::vector<postgres::SessionStatement> out = entry.statements;
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].text = sql.substr(entry.spans[i].first, entry.spans[i].second);
  }
  return out;
}

}  // namespace fencegate::pgport
