// Copyright fencegate authors.
//
// PgConnection: one libpq connection of a PostgreSQL route, and what the
// adapter knows about its session.
//
// The adapter drives it in libpq's pipeline mode (a batch of Writes, each
// with its fence call, statements and sync, in one round trip); set-up
// queries (the role check, preparing the fence call) run on it before its
// first batch. It records the parameters the server reported when the
// session was fresh (the tripwire's baseline: a Write that changes one of
// them has changed the session).
//
// Thread safety: none; one thread at a time (the pool hands it to one).

#ifndef STORAGE_ADAPTERS_POSTGRES_PG_CONNECTION_H_
#define STORAGE_ADAPTERS_POSTGRES_PG_CONNECTION_H_

#include <libpq-fe.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "storage_adapters/postgres/held_domains.h"
#include "storage_adapters/postgres/sql_text.h"

namespace fencegate {

class PgConnection final {
 public:
  // Connects now (blocking, up to the conninfo's connect_timeout).
  // UNAVAILABLE with libpq's message if it cannot.
  static absl::StatusOr<std::unique_ptr<PgConnection>> Open(
      const std::string& conninfo);
  PgConnection(const PgConnection&) = delete;
  PgConnection& operator=(const PgConnection&) = delete;
  ~PgConnection();

  // The libpq handle, owned by this object; never null.
  PGconn* raw() const { return conn_; }

  // Runs one query with text parameters outside pipeline mode and waits
  // for it. UNAVAILABLE with PostgreSQL's message if it fails.
  absl::StatusOr<postgres::PgResult> Exec(
      const std::string& sql, const std::vector<std::string>& params = {});

  // True if the connection can take a request: open, idle, and the server
  // has sent nothing since the last request (a server that shuts down or
  // terminates the session sends its goodbye). Never blocks.
  bool IdleAndAlive();

  // True once the server sent a FATAL or PANIC error while no query of
  // ours was running (between two pipeline syncs, say): it ended the
  // session there, before the next query. libpq hands such an error to the
  // notice receiver, not to a result; other notices are dropped.
  bool ended_between_queries() const { return ended_between_queries_; }

  // The name of the fence call's prepared statement on this session:
  // "fencegate_fence_" and 16 random hex digits, so that nothing a Write
  // sends can name it without first reading it.
  const std::string& fence_statement() const { return fence_statement_; }
  // The name of fence_seq()'s prepared statement (fence_statement() and
  // "_seq"), and whether it is prepared on this session now: a database
  // whose fence schema predates fence_seq() cannot prepare it, and a
  // session reset drops it.
  std::string fence_seq_statement() const { return fence_statement_ + "_seq"; }
  bool seq_prepared() const { return seq_prepared_; }
  void set_seq_prepared(bool prepared) { seq_prepared_ = prepared; }

  // The route's held fence (held_domains.h). Armed: the connection is
  // armed with `secret` in the database (fence_hold.h), and its Writes
  // call fence_hold() (and fence_seq() with the secret), holding at most
  // `bound` domains. Disarmed: a session reset (DISCARD ALL) gave up the
  // arm and every hold; its Writes call fence() again.
  // The route's HoldTally, if given, is told what it holds.
  void Arm(std::string secret, size_t bound,
           postgres::HoldTally* tally = nullptr) {
    secret_ = std::move(secret);
    held_.Reset(bound, tally);
  }
  void Disarm() {
    secret_.clear();
    held_.Clear();
  }
  bool armed() const { return !secret_.empty(); }
  const std::string& secret() const { return secret_; }
  postgres::HeldDomains& held() { return held_; }
  const postgres::HeldDomains& held() const { return held_; }
  // The names of fence_hold()'s and the armed fence_seq()'s prepared
  // statements.
  std::string fence_hold_statement() const { return fence_statement_ + "_h"; }
  std::string fence_seq_armed_statement() const {
    return fence_statement_ + "_hs";
  }

  // Records the parameters the server reports now (PQparameterStatus) as
  // the session's baseline.
  void RecordBaseline();
  // The first reported parameter whose value differs from the baseline,
  // as "name: before -> now"; empty if none does.
  std::string ChangedParameter() const;

 private:
  explicit PgConnection(PGconn* conn);
  static void OnNotice(void* self, const PGresult* notice);

  PGconn* const conn_;
  const std::string fence_statement_;
  bool ended_between_queries_ = false;
  bool seq_prepared_ = false;
  std::string secret_;
  postgres::HeldDomains held_{0};
  std::vector<std::pair<const char*, std::string>> baseline_;
};

}  // namespace fencegate

#endif  // STORAGE_ADAPTERS_POSTGRES_PG_CONNECTION_H_
