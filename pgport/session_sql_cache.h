// Copyright fencegate authors.
//
// SessionSqlCache: ClassifySessionSql (postgres/include/postgres/
// session_sql.h) for the query strings a port sees again and again -- a
// worker's prepared statements and its few query texts -- without parsing
// each again. Parsing costs tens of microseconds, more than the rest of a
// message's relay. Bounded: when it holds `max_entries` strings it is
// emptied and fills again; strings over `max_text_bytes` are parsed every
// time and never kept.
//
// Thread safety: none; the port's I/O thread uses it.

#ifndef PGPORT_SESSION_SQL_CACHE_H_
#define PGPORT_SESSION_SQL_CACHE_H_

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "postgres/session_sql.h"

namespace fencegate::pgport {

class SessionSqlCache {
 public:
  explicit SessionSqlCache(size_t max_entries = 4096,
                           size_t max_text_bytes = 16384)
      : max_entries_(max_entries), max_text_bytes_(max_text_bytes) {}

  // What ClassifySessionSql(sql) returns; each statement's text points into
  // `sql`.
  absl::StatusOr<std::vector<postgres::SessionStatement>> Classify(
      absl::string_view sql);

  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    absl::Status error;
    // The statements with their texts cleared, and where each text lies in
    // the string.
    std::vector<postgres::SessionStatement> statements;
    std::vector<std::pair<size_t, size_t>> spans;
  };

  const size_t max_entries_;
  const size_t max_text_bytes_;
  absl::flat_hash_map<std::string, Entry> entries_;
};

}  // namespace fencegate::pgport

#endif  // PGPORT_SESSION_SQL_CACHE_H_
