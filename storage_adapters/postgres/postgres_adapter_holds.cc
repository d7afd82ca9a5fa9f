// Copyright fencegate authors.
//
// PostgresAdapter, the route's held fence (docs/postgres.md, "The fence a
// connection holds"): arming a pooled connection, and the raise watch that
// gives held domains up when a raise waits for them.

#include <openssl/rand.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "postgres/fence_hold.h"
#include "storage_adapters/postgres/postgres_adapter.h"

namespace fencegate {
namespace {

// PQprepare, true if the server took it.
bool Prepared(PGconn* c, const std::string& name, const std::string& sql,
              int params) {
  postgres::PgResult r(
      PQprepare(c, name.c_str(), sql.c_str(), params, nullptr));
  return r != nullptr && PQresultStatus(r.get()) == PGRES_COMMAND_OK;
}

}  // namespace

absl::Status PostgresAdapter::ArmConnection(PgConnection& c) {
  if (options_.held_domains <= 0) return absl::OkStatus();
  PGconn* raw = c.raw();
  // A schema before version 5 has no fence_hold(): the connection calls
  // fence() as before.
  if (!Prepared(raw, c.fence_hold_statement(),
                postgres::FenceHoldSql(options_.fence_schema), 3) ||
      !Prepared(raw, c.fence_seq_armed_statement(),
                postgres::FenceSeqArmedSql(options_.fence_schema), 5)) {
    return PQstatus(raw) == CONNECTION_OK
               ? absl::OkStatus()
               : absl::UnavailableError(
                     absl::StrCat("postgres ", options_.redacted_uri, ": ",
                                  postgres::ConnectionError(raw)));
  }
  std::string bytes(24, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(bytes.data()),
                 static_cast<int>(bytes.size())) != 1) {
    return absl::OkStatus();  // Not armed: no secret to arm it with.
  }
  std::string secret = absl::Base64Escape(bytes);
  // Armed in a transaction of its own: hold() with no domain arms only. It
  // refuses a session at another isolation level than READ COMMITTED
  // (25001), which then calls fence(), whose locked read serves there.
  const std::string hold = postgres::HoldSql(options_.fence_schema);
  const char* params[3] = {nullptr, nullptr, secret.c_str()};
  postgres::PgResult armed(
      PQexecParams(raw, hold.c_str(), 3, nullptr, params, nullptr, nullptr, 0));
  if (armed == nullptr || PQresultStatus(armed.get()) != PGRES_TUPLES_OK) {
    return PQstatus(raw) == CONNECTION_OK
               ? absl::OkStatus()
               : absl::UnavailableError(
                     absl::StrCat("postgres ", options_.redacted_uri, ": ",
                                  postgres::ConnectionError(raw)));
  }
  c.Arm(std::move(secret), static_cast<size_t>(options_.held_domains),
        &hold_tally_);
  return absl::OkStatus();
}

void PostgresAdapter::WatchRaises() {
  std::vector<std::shared_ptr<Link>> links;
  {
    absl::MutexLock lock(&links_mu_);
    for (const std::weak_ptr<Link>& l : links_) {
      if (std::shared_ptr<Link> link = l.lock()) links.push_back(link);
    }
  }
  absl::flat_hash_set<std::string> held;
  for (const std::shared_ptr<Link>& link : links) {
    absl::MutexLock lock(&link->mu);
    if (link->closed) continue;
    for (std::string& domain : link->pg->held().Domains()) {
      held.insert(std::move(domain));
    }
  }
  if (held.empty()) return;
  if (watch_conn_ != nullptr && PQstatus(watch_conn_->raw()) != CONNECTION_OK) {
    watch_conn_.reset();
  }
  if (watch_conn_ == nullptr) {
    absl::StatusOr<std::unique_ptr<PgConnection>> opened =
        PgConnection::Open(options_.conninfo);
    // Unreachable: the raise still ends the holders' backends after its
    // bound; asked again next time.
    if (!opened.ok()) return;
    watch_conn_ = *std::move(opened);
  }
  const std::vector<std::string> domains(held.begin(), held.end());
  absl::StatusOr<postgres::PgResult> asked =
      watch_conn_->Exec(postgres::RaisesWaitingSql(options_.fence_schema),
                        {postgres::TextArrayLiteral(domains)});
  if (!asked.ok()) {
    watch_conn_.reset();
    return;
  }
  const PGresult* r = asked->get();
  if (PQntuples(r) != 1 || PQgetisnull(r, 0, 0)) return;  // None waits.
  std::vector<std::string> waiting;
  for (absl::string_view at : absl::StrSplit(PQgetvalue(r, 0, 0), ',')) {
    size_t i = 0;
    if (absl::SimpleAtoi(at, &i) && i >= 1 && i <= domains.size()) {
      waiting.push_back(domains[i - 1]);
    }
  }
  GiveUp(waiting, /*waiting=*/true);
}

void PostgresAdapter::GiveUp(const std::vector<std::string>& domains,
                             bool waiting) {
  if (domains.empty()) return;
  prometheus::Counter* given_up = waiting ? given_up_waiting_ : given_up_own_;
  std::vector<std::shared_ptr<Link>> links;
  {
    absl::MutexLock lock(&links_mu_);
    for (const std::weak_ptr<Link>& l : links_) {
      if (std::shared_ptr<Link> link = l.lock()) links.push_back(link);
    }
  }
  // Every holder owes its release: a busy connection sends it before its
  // next batch; an idle one is closed, which releases at once.
  absl::flat_hash_set<const postgres::BatchQueue::Connection*> owing;
  for (const std::shared_ptr<Link>& link : links) {
    absl::MutexLock lock(&link->mu);
    if (link->closed) continue;
    for (const std::string& domain : domains) {
      if (link->pg->held().Holds(domain)) {
        link->pg->held().Release(domain);
        owing.insert(link->owner);
        if (given_up != nullptr) given_up->Increment();
      }
    }
  }
  if (!owing.empty()) {
    const size_t closed =
        queue_.CloseIdleIf([&](const postgres::BatchQueue::Connection& c) {
          return owing.contains(&c);
        });
    if (hold_closes_ != nullptr) {
      hold_closes_->Increment(static_cast<double>(closed));
    }
  }
}

}  // namespace fencegate
