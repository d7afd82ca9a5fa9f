// Copyright fencegate authors.

#include "storage_adapters/postgres/pg_connection.h"

#include <poll.h>

#include <random>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fencegate {
namespace {

// Every parameter a PostgreSQL 15 server reports to its client (GUC_REPORT),
// so every one a session can change without the client being told
// otherwise. A server that does not report one leaves it null, both in the
// baseline and later.
constexpr const char* kReported[] = {
    "application_name",
    "client_encoding",
    "DateStyle",
    "default_transaction_read_only",
    "in_hot_standby",
    "integer_datetimes",
    "IntervalStyle",
    "is_superuser",
    "server_encoding",
    "server_version",
    "session_authorization",
    "standard_conforming_strings",
    "TimeZone",
};

std::mt19937_64& RandomBits() {
  thread_local std::mt19937_64 bits{std::random_device{}()};
  return bits;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PgConnection>> PgConnection::Open(
    const std::string& conninfo) {
  PGconn* c = PQconnectdb(conninfo.c_str());
  if (c == nullptr) {
    return absl::UnavailableError("cannot connect: out of memory");
  }
  if (PQstatus(c) != CONNECTION_OK) {
    std::string what = postgres::Trimmed(PQerrorMessage(c));
    PQfinish(c);
    return absl::UnavailableError(absl::StrCat("cannot connect: ", what));
  }
  return std::unique_ptr<PgConnection>(new PgConnection(c));
}

PgConnection::PgConnection(PGconn* conn)
    : conn_(conn),
      fence_statement_(absl::StrFormat(
          "fencegate_fence_%016x",
          std::uniform_int_distribution<uint64_t>()(RandomBits()))) {
  PQsetNoticeReceiver(conn_, &PgConnection::OnNotice, this);
}

PgConnection::~PgConnection() { PQfinish(conn_); }

absl::StatusOr<postgres::PgResult> PgConnection::Exec(
    const std::string& sql, const std::vector<std::string>& params) {
  std::vector<const char*> values;
  values.reserve(params.size());
  for (const std::string& p : params) values.push_back(p.c_str());
  postgres::PgResult r(PQexecParams(conn_, sql.c_str(),
                                    static_cast<int>(values.size()), nullptr,
                                    values.data(), nullptr, nullptr, 0));
  const ExecStatusType status =
      r == nullptr ? PGRES_FATAL_ERROR : PQresultStatus(r.get());
  if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) {
    return absl::UnavailableError(postgres::Trimmed(
        r == nullptr ? PQerrorMessage(conn_) : PQresultErrorMessage(r.get())));
  }
  return r;
}

void PgConnection::OnNotice(void* self, const PGresult* notice) {
  const char* severity =
      PQresultErrorField(notice, PG_DIAG_SEVERITY_NONLOCALIZED);
  if (severity != nullptr && (std::string_view(severity) == "FATAL" ||
                              std::string_view(severity) == "PANIC")) {
    static_cast<PgConnection*>(self)->ended_between_queries_ = true;
  }
}

bool PgConnection::IdleAndAlive() {
  if (PQstatus(conn_) != CONNECTION_OK) return false;
  if (PQtransactionStatus(conn_) != PQTRANS_IDLE) return false;
  pollfd pfd{PQsocket(conn_), POLLIN, 0};
  // Nothing arrives on an idle connection that fencegate uses (it never
  // LISTENs), except the server's goodbye -- FATAL 57P01 and then EOF, on
  // shutdown or pg_terminate_backend -- or, rarely, a parameter change. The
  // EOF may not have arrived yet, so anything at all means: do not use it.
  return ::poll(&pfd, 1, 0) == 0;
}

void PgConnection::RecordBaseline() {
  baseline_.clear();
  for (const char* name : kReported) {
    const char* value = PQparameterStatus(conn_, name);
    baseline_.emplace_back(name, value == nullptr ? "<unset>" : value);
  }
}

std::string PgConnection::ChangedParameter() const {
  for (const auto& [name, before] : baseline_) {
    const char* now = PQparameterStatus(conn_, name);
    const absl::string_view value = now == nullptr ? "<unset>" : now;
    if (value != before) {
      return absl::StrCat(name, ": ", before, " -> ", value);
    }
  }
  return std::string();
}

}  // namespace fencegate
