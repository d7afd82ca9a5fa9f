// Copyright fencegate authors.
//
// What one SQL statement sent through a PostgreSQL route can do to the
// session it runs on, decided by PostgreSQL's own parser (libpg_query, the
// PostgreSQL 15 grammar), never by keywords:
//
//   kSafe     exactly one INSERT, UPDATE, DELETE or MERGE, or a SELECT
//             without INTO, none of whose function calls or relations
//             reaches session state (SessionStateFunctions(),
//             SessionStateRelations()). It runs on a pooled session without
//             a reset before or after it.
//   kDirty    DO or CALL: PL code may change anything the session keeps.
//             The adapter runs it last in its batch, inside BEGIN ... COMMIT,
//             and resets the session (DISCARD ALL) before anyone else uses
//             the connection; only routes that allow it take one.
//   kRefused  everything else: every utility statement (SET, RESET, BEGIN,
//             COMMIT, PREPARE, DECLARE, LISTEN, DISCARD, LOAD, LOCK, COPY,
//             CREATE, ALTER, DROP, TRUNCATE, EXPLAIN, SHOW, ...), SELECT INTO,
//             text that does not parse, empty text, and more than one
//             statement; and any statement that calls fence_next() or
//             fences() (fence_schema.h: only the gateway calls them).
//
// Names are compared as the parser decoded them (a quoted or U&"..." name
// is its decoded text; unquoted names are folded to lower case), and a
// function is matched on its last name part, whatever schema qualifies it.
//
// Thread safety: ClassifyStatement is a pure function, safe from any thread
// (libpg_query keeps its memory per thread). SqlClassifier is safe for
// concurrent use.

#ifndef POSTGRES_SQL_CLASSIFIER_H_
#define POSTGRES_SQL_CLASSIFIER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "postgres/fence_schema.h"
#include "postgres/session_sql.h"

namespace fencegate::postgres {

enum class StatementClass { kSafe, kDirty, kRefused };

// The names in a statement that may run code of their own: what it calls
// by name, for CatalogNames (catalog_names.h) to tell whether PostgreSQL
// will resolve them outside pg_catalog. Each name once, as decoded.
struct Callees {
  // f in f(...) (its last name part).
  std::vector<std::string> functions;
  // Names PostgreSQL may read as the call f(x) (functional notation x.f):
  // each part after the first of a column reference, and each field
  // selected from an expression.
  std::vector<std::string> fields;
  // Operators (a + b, x = ANY (...), ORDER BY ... USING <), last name part.
  std::vector<std::string> operators;
  // A function or operator named with a schema other than pg_catalog.
  bool qualified = false;
  // Comparisons the statement makes without naming an operator, which
  // PostgreSQL resolves by type: CASE x WHEN, GREATEST and LEAST, JOIN
  // USING and NATURAL, DISTINCT, GROUP BY, ORDER BY without USING, UNION,
  // INTERSECT and EXCEPT, window partitions and orders. (BETWEEN's >= and
  // <=, and their negations, are in `operators`.)
  bool implicit_operators = false;
};

struct Verdict {
  StatementClass kind = StatementClass::kRefused;
  // The statement's kind as SQL names it: "UPDATE", "SELECT", "DO", "SET",
  // "transaction control (COMMIT)", "SELECT INTO", ...; empty when the text
  // holds no single statement.
  std::string statement;
  // For kRefused: why, in words a caller can act on (names the statement
  // kind, or the function or relation that reaches session state, or the
  // parser's message).
  std::string reason;
  // The parameters the statement takes: the highest $n it refers to
  // (PostgreSQL wants exactly that many). 0 for a DO block.
  int params = 0;
  // What it calls by name (kSafe and kDirty statements).
  Callees callees;
};

// The functions that reach session state are SessionStateFunctions() and
// SessionStateFunctionPrefixes() (fence_schema.h, shared with pg-setup's
// revokes), matched by their decoded last name part in calls f(...), and in
// the functional notation x.f that PostgreSQL reads as f(x).
// Relations that read or change session settings: pg_settings.
const std::vector<std::string>& SessionStateRelations();

// Parses `sql` and classifies it. Never fails: what cannot be parsed is
// kRefused with the parser's message.
Verdict ClassifyStatement(absl::string_view sql);

// The one SQL classifier of the gateway, serving both front doors:
// ClassifyStatement (a gRPC Write's statements) and ClassifySessionSql
// (session_sql.h: a PostgreSQL-port client's query strings and prepared
// statements), over one bounded cache keyed by SQL text, least recently
// used out first. Parsing costs tens of microseconds; a hit costs a hash of
// the text under a mutex. A text both doors send is kept once, with each
// door's answer.
class SqlClassifier {
 public:
  struct Options {
    // Texts kept at most. Default: 4096.
    size_t max_entries = 4096;
    // Bytes of SQL text kept at most (texts longer than a quarter of it are
    // classified every time, never kept). Default: 4 MiB.
    size_t max_bytes = 4 << 20;
  };
  struct Counts {
    size_t entries = 0;
    size_t bytes = 0;
    uint64_t hits = 0;
    uint64_t misses = 0;
  };

  explicit SqlClassifier(Options options);
  SqlClassifier(const SqlClassifier&) = delete;
  SqlClassifier& operator=(const SqlClassifier&) = delete;

  // ClassifyStatement(sql), from the cache or parsed now (and kept). Sets
  // *hit, if given, to whether it came from the cache.
  Verdict Classify(absl::string_view sql, bool* hit = nullptr);

  // ClassifySessionSql(sql), from the cache or parsed now (and kept); each
  // statement's text points into `sql`.
  absl::StatusOr<std::vector<SessionStatement>> ClassifySession(
      absl::string_view sql);

  Counts counts() const;

 private:
  // ClassifySessionSql's answer, kept apart from the text it views.
  struct SessionAnswer {
    absl::Status error;
    // The statements with their texts cleared, and where each lies.
    std::vector<SessionStatement> statements;
    std::vector<std::pair<size_t, size_t>> spans;
  };
  struct Answers {
    std::optional<Verdict> statement;
    std::optional<SessionAnswer> session;
  };
  using Entry = std::pair<std::string, Answers>;

  // Runs `read` on the cached answers of `sql` if any (counting a hit when
  // it returns true); otherwise counts a miss.
  bool Lookup(absl::string_view sql,
              const std::function<bool(const Answers&)>& read);
  // Keeps `fill`'s answer for `sql`, unless the text is too long.
  void Keep(absl::string_view sql, const std::function<void(Answers&)>& fill);

  const Options options_;
  mutable absl::Mutex mu_;
  // Most recently used first.
  std::list<Entry> lru_ ABSL_GUARDED_BY(mu_);
  // Keys are views of the texts held in lru_.
  absl::flat_hash_map<absl::string_view, std::list<Entry>::iterator> index_
      ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace fencegate::postgres

#endif  // POSTGRES_SQL_CLASSIFIER_H_
