// Copyright fencegate authors.
//
// PostgresAdapter: this gateway's presence in the database, and the count
// of the other gateways present (OtherGateways), for the fleet check of
// LEASE-bound domains (gateway/fleet_watch.h). The presence is a connection
// of the adapter's own whose application_name names the fence schema and
// this process; PostgreSQL shows it in pg_stat_activity to every role, and
// it ends with the process (even after kill -9, when the server sees the
// socket close). No table, no function, no privilege is needed.

#include <libpq-fe.h>

#include <cstdint>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "storage_adapters/postgres/postgres_adapter.h"
#include "storage_adapters/postgres/sql_text.h"

namespace fencegate {

std::string PostgresAdapter::PresencePrefixOf(const std::string& schema) {
  // FNV-1a: the same in every build, unlike std::hash.
  uint32_t hash = 2166136261u;
  for (unsigned char c : schema) {
    hash = (hash ^ c) * 16777619u;
  }
  return absl::StrFormat("fg-gw:%08x:", hash);
}

absl::Status PostgresAdapter::OpenPresenceLocked() {
  if (presence_ != nullptr && PQstatus(presence_) == CONNECTION_OK) {
    return absl::OkStatus();
  }
  if (presence_ != nullptr) PQfinish(presence_);
  // The route's URI, with application_name given after it (and so taking
  // precedence over one the URI sets), and the server's keepalives short,
  // so that the server ends the presence of a gateway whose host died
  // within about a minute rather than hours.
  const char* keys[] = {"dbname", "application_name", "options", nullptr};
  const char* values[] = {options_.conninfo.c_str(), presence_name_.c_str(),
                          "-c tcp_keepalives_idle=30 -c "
                          "tcp_keepalives_interval=10 -c "
                          "tcp_keepalives_count=3 -c statement_timeout=5000",
                          nullptr};
  presence_ = PQconnectdbParams(keys, values, /*expand_dbname=*/1);
  if (presence_ == nullptr || PQstatus(presence_) != CONNECTION_OK) {
    std::string error = presence_ == nullptr
                            ? std::string("out of memory")
                            : postgres::ConnectionError(presence_);
    if (presence_ != nullptr) PQfinish(presence_);
    presence_ = nullptr;
    return absl::UnavailableError(
        absl::StrCat("postgres ", options_.redacted_uri,
                     ": opening the gateway's presence connection: ", error));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> PostgresAdapter::OtherGateways() {
  absl::MutexLock lock(&presence_mu_);
  if (absl::Status s = OpenPresenceLocked(); !s.ok()) return s;
  const std::string pattern = absl::StrCat(presence_prefix_, "%");
  const char* params[] = {pattern.c_str(), presence_name_.c_str()};
  postgres::PgResult r(
      PQexecParams(presence_,
                   "SELECT count(*) FILTER (WHERE application_name <> $2), "
                   "count(*) FILTER (WHERE application_name = $2) "
                   "FROM pg_catalog.pg_stat_activity WHERE datname = "
                   "pg_catalog.current_database() AND application_name LIKE $1",
                   2, nullptr, params, nullptr, nullptr, 0));
  if (r == nullptr || PQresultStatus(r.get()) != PGRES_TUPLES_OK) {
    std::string error = r == nullptr
                            ? postgres::ConnectionError(presence_)
                            : postgres::Trimmed(PQresultErrorMessage(r.get()));
    PQfinish(presence_);  // Opened again by the next count.
    presence_ = nullptr;
    return absl::UnavailableError(
        absl::StrCat("postgres ", options_.redacted_uri,
                     ": counting the gateways present: ", error));
  }
  int others = 0;
  int self = 0;
  if (!absl::SimpleAtoi(PQgetvalue(r.get(), 0, 0), &others) ||
      !absl::SimpleAtoi(PQgetvalue(r.get(), 0, 1), &self) || self < 1) {
    // Fail closed: a count that does not see this gateway cannot be
    // trusted to see the others.
    return absl::UnavailableError(
        absl::StrCat("postgres ", options_.redacted_uri,
                     ": pg_stat_activity does not show this gateway's presence "
                     "connection, so the others cannot be counted"));
  }
  return others;
}

}  // namespace fencegate
