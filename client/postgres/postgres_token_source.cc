// Copyright fencegate authors.

#include "fencegate/client/postgres/postgres_token_source.h"

#include <libpq-fe.h>

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "client/gateway_fence.h"
#include "client/holder_id.h"
#include "client/kept_lock.h"
#include "pqxx/pqxx"

namespace fencegate::client {
namespace {

using internal::HolderId;

bool IsPlainIdentifier(const std::string& name) {
  if (name.empty() || name.size() > 63) return false;
  if (!absl::ascii_islower(static_cast<unsigned char>(name[0])) &&
      name[0] != '_') {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_islower(static_cast<unsigned char>(c)) ||
           absl::ascii_isdigit(static_cast<unsigned char>(c)) || c == '_';
  });
}

// The statements, for one table and sequence.
struct Statements {
  explicit Statements(const PostgresTokenSourceOptions& o)
      : missing(absl::StrCat("SELECT to_regclass('", o.sequence,
                             "') IS NULL OR to_regclass('", o.table,
                             "') IS NULL")),
        create(absl::StrCat(
            "CREATE SEQUENCE IF NOT EXISTS ", o.sequence,
            "; CREATE TABLE IF NOT EXISTS ", o.table,
            " (name text PRIMARY KEY, owner text NOT NULL, token bigint NOT "
            "NULL, expires_at timestamptz NOT NULL)")),
        acquire(absl::StrCat(
            "INSERT INTO ", o.table,
            " AS l (name, owner, token, expires_at) VALUES ($1, $2, nextval('",
            o.sequence,
            "'), now() + $3::bigint * interval '1 millisecond') ON CONFLICT "
            "(name) DO UPDATE SET owner = excluded.owner, token = "
            "excluded.token, expires_at = excluded.expires_at WHERE "
            "l.expires_at < now() RETURNING token")),
        holder(absl::StrCat("SELECT owner, token FROM ", o.table,
                            " WHERE name = $1")),
        renew(absl::StrCat(
            "UPDATE ", o.table,
            " SET expires_at = now() + $3::bigint * interval '1 millisecond' "
            "WHERE name = $1 AND owner = $2 AND expires_at >= now()")),
        release(absl::StrCat("DELETE FROM ", o.table,
                             " WHERE name = $1 AND owner = $2")) {}
  const std::string missing, create, acquire, holder, renew, release;
};

absl::Status PgError(const std::exception& e, absl::string_view what) {
  if (dynamic_cast<const pqxx::broken_connection*>(&e) != nullptr) {
    return absl::UnavailableError(
        absl::StrCat("postgres ", what, ": ", e.what()));
  }
  return absl::InternalError(absl::StrCat("postgres ", what, ": ", e.what()));
}

// Runs `statement` with `args` in autocommit; the affected or returned
// rows.
template <typename... Args>
absl::StatusOr<pqxx::result> Exec(pqxx::connection& c,
                                  const std::string& statement,
                                  Args&&... args) {
  try {
    pqxx::nontransaction tx(c);
    return tx.exec_params(statement, std::forward<Args>(args)...);
  } catch (const std::exception& e) {
    return PgError(e, "statement");
  }
}

// A connection whose statements (and waits for row locks) give up after
// `limit`, so that a renewal never outlasts the lease it renews; libpqxx
// sets the limits again when it reconnects.
absl::StatusOr<std::unique_ptr<pqxx::connection>> Connect(
    const std::string& dsn, absl::Duration limit) {
  try {
    auto c = std::make_unique<pqxx::connection>(dsn);
    const std::string ms = absl::StrCat(absl::ToInt64Milliseconds(limit));
    c->set_variable("statement_timeout", ms);
    c->set_variable("lock_timeout", ms);
    return c;
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("postgres: ", e.what()));
  }
}

// Creates the table and sequence if missing; two clients racing to create
// them is fine (the loser finds them there).
absl::Status CreateIfMissing(pqxx::connection& c, const Statements& st) {
  for (int attempt = 0;; ++attempt) {
    try {
      pqxx::nontransaction tx(c);
      if (!tx.exec(st.missing)[0][0].as<bool>()) return absl::OkStatus();
      tx.exec(st.create);
      return absl::OkStatus();
    } catch (const std::exception& e) {
      if (attempt >= 2) return PgError(e, "creating the lock table");
    }
  }
}

class PostgresLock final : public internal::KeptLock {
 public:
  PostgresLock(std::unique_ptr<pqxx::connection> connection,
               std::shared_ptr<const Statements> statements, std::string name,
               uint64_t token, std::string id, absl::Duration ttl,
               absl::Time granted, std::function<void()> on_lost)
      : KeptLock(std::move(name), token, ttl, granted, std::move(on_lost)),
        connection_(std::move(connection)),
        statements_(std::move(statements)),
        id_(std::move(id)),
        ttl_ms_(absl::ToInt64Milliseconds(ttl)) {
    StartKeepAlive();
  }
  ~PostgresLock() override { Shutdown(); }

 private:
  // The connection is the keep-alive thread's until Remove(), which runs
  // after that thread has stopped. After a broken connection, libpqxx
  // reconnects on the next statement.
  Renewal Renew() override {
    absl::StatusOr<pqxx::result> r =
        Exec(*connection_, statements_->renew, name(), id_, ttl_ms_);
    if (!r.ok()) return Renewal::kFailed;
    // No row: gone, someone else's or expired.
    return r->affected_rows() == 1 ? Renewal::kRenewed : Renewal::kGone;
  }

  absl::Status Remove() override {
    absl::StatusOr<pqxx::result> r =
        Exec(*connection_, statements_->release, name(), id_);
    if (!r.ok()) return r.status();
    if (r->affected_rows() != 1) {
      return absl::FailedPreconditionError(absl::StrCat(
          "lock \"", name(), "\" is no longer held by this holder"));
    }
    return absl::OkStatus();
  }

  const std::unique_ptr<pqxx::connection> connection_;
  const std::shared_ptr<const Statements> statements_;
  const std::string id_;
  const int64_t ttl_ms_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PostgresTokenSource>>
PostgresTokenSource::Create(PostgresTokenSourceOptions options) {
  char* error = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(options.dsn.c_str(), &error);
  if (parsed == nullptr) {
    std::string why = error != nullptr ? error : "out of memory";
    PQfreemem(error);
    return absl::InvalidArgumentError(absl::StrCat(
        "postgres DSN: ", absl::StripTrailingAsciiWhitespace(why)));
  }
  PQconninfoFree(parsed);
  for (const std::string* name : {&options.table, &options.sequence}) {
    if (!IsPlainIdentifier(*name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("postgres lock table or sequence \"", *name,
                       "\": a plain identifier, [a-z_][a-z0-9_]*"));
    }
  }
  if (options.gateway == nullptr) {
    return absl::InvalidArgumentError(
        "the postgres token source needs the gateway's channel");
  }
  return std::unique_ptr<PostgresTokenSource>(
      new PostgresTokenSource(std::move(options)));
}

PostgresTokenSource::PostgresTokenSource(PostgresTokenSourceOptions options)
    : options_(std::move(options)) {}

PostgresTokenSource::~PostgresTokenSource() = default;

absl::StatusOr<std::unique_ptr<HeldLock>> PostgresTokenSource::Acquire(
    const std::string& name, const LockOptions& options,
    std::function<void()> on_lost) {
  if (absl::Status s = internal::CheckLockRequest(name, options); !s.ok()) {
    return s;
  }
  absl::StatusOr<std::unique_ptr<pqxx::connection>> connection =
      Connect(options_.dsn, std::max(absl::Milliseconds(100), options.ttl / 3));
  if (!connection.ok()) return connection.status();
  auto statements = std::make_shared<const Statements>(options_);
  if (absl::Status s = CreateIfMissing(**connection, *statements); !s.ok()) {
    return s;
  }
  const std::string id = HolderId(options.owner);
  const int64_t ttl_ms = absl::ToInt64Milliseconds(options.ttl);
  const absl::Time deadline = absl::Now() + options.wait;
  uint64_t token = 0;
  absl::Time granted;
  for (;;) {
    granted = absl::Now();
    absl::StatusOr<pqxx::result> r =
        Exec(**connection, statements->acquire, name, id, ttl_ms);
    if (!r.ok()) return r.status();
    if (!r->empty()) {
      token = (*r)[0][0].as<uint64_t>();
      break;
    }
    if (absl::Now() >= deadline) {
      absl::StatusOr<pqxx::result> holder =
          Exec(**connection, statements->holder, name);
      std::string who = "(unknown)";
      if (holder.ok() && !holder->empty()) {
        who = absl::StrCat((*holder)[0][0].c_str(), "\" (token ",
                           (*holder)[0][1].c_str(), ")");
      }
      return absl::DeadlineExceededError(
          absl::StrCat("lock \"", name, "\" is held by \"", who));
    }
    absl::SleepFor(std::min(absl::Milliseconds(50), deadline - absl::Now()));
  }
  // Raise the fence before the holder works.
  if (absl::Status s = internal::RaiseFence(options_.gateway, name, token);
      !s.ok()) {
    Exec(**connection, statements->release, name, id).IgnoreError();
    return s;
  }
  return std::unique_ptr<HeldLock>(
      new PostgresLock(*std::move(connection), std::move(statements), name,
                       token, id, options.ttl, granted, std::move(on_lost)));
}

}  // namespace fencegate::client
