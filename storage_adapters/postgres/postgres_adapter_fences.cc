// Copyright fencegate authors.
//
// PostgresAdapter: the fence table reached outside Writes (RaiseFence,
// NextFence, ReadFences), for the gateway's Fence calls, lease grants and
// start-up.

#include <libpq-fe.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "fencegate/common/stale_token.h"
#include "postgres/fence_schema.h"
#include "postgres/fence_token.h"
#include "storage_adapters/postgres/postgres_adapter.h"
#include "storage_adapters/postgres/sql_text.h"

namespace fencegate {
namespace {

using postgres::kMaxFenceToken;

}  // namespace

absl::StatusOr<postgres::PgResult> PostgresAdapter::ExecControl(
    const std::string& sql, const std::vector<std::string>& params,
    std::string* sqlstate, std::string* detail) {
  absl::StatusOr<PgConnectionPool::Lease> lease = control_pool_.Acquire();
  if (!lease.ok()) return lease.status();
  PGconn* c = lease->conn().raw();
  std::vector<const char*> values;
  values.reserve(params.size());
  for (const std::string& p : params) values.push_back(p.c_str());
  postgres::PgResult r(PQexecParams(c, sql.c_str(),
                                    static_cast<int>(values.size()), nullptr,
                                    values.data(), nullptr, nullptr, 0));
  if (r != nullptr && PQresultStatus(r.get()) == PGRES_TUPLES_OK) return r;
  if (r == nullptr || PQstatus(c) != CONNECTION_OK) {
    lease->Discard();
    return absl::UnavailableError(
        absl::StrCat("postgres ", options_.redacted_uri,
                     ": connection lost reaching the fence table: ",
                     postgres::ConnectionError(c)));
  }
  const char* state = PQresultErrorField(r.get(), PG_DIAG_SQLSTATE);
  const char* more = PQresultErrorField(r.get(), PG_DIAG_MESSAGE_DETAIL);
  *sqlstate = state == nullptr ? "" : state;
  *detail = more == nullptr ? "" : more;
  if (PQtransactionStatus(c) != PQTRANS_IDLE) lease->Discard();
  return postgres::SqlErrorStatus(*sqlstate, PQresultErrorMessage(r.get()), -1);
}

uint64_t PostgresAdapter::MaxFenceToken() const { return kMaxFenceToken; }

absl::Status PostgresAdapter::RaiseFence(absl::string_view domain,
                                         uint64_t token) {
  if (absl::Status s = postgres::CheckFenceToken(token, "token"); !s.ok()) {
    return s;
  }
  // The route's own holders of another token give the domain up first.
  if (hold_tally_.HeldBelow(domain, token)) GiveUp({std::string(domain)});
  std::string state, detail;
  absl::StatusOr<postgres::PgResult> r =
      ExecControl(fence_call_sql_, {std::string(domain), absl::StrCat(token)},
                  &state, &detail);
  if (r.ok()) return absl::OkStatus();
  if (std::optional<uint64_t> held =
          postgres::StaleHeldToken(state, detail.c_str());
      held.has_value()) {
    return StaleTokenError(domain, token, *held);
  }
  return r.status();
}

absl::StatusOr<uint64_t> PostgresAdapter::NextFence(absl::string_view domain,
                                                    uint64_t at_least) {
  if (at_least > kMaxFenceToken) {
    return absl::OutOfRangeError(absl::StrCat(
        "token ", at_least, " is above 2^63-1, the most PostgreSQL can hold"));
  }
  // Always a raise: the route's own holders give the domain up first.
  if (hold_tally_.HeldAtAll(domain)) GiveUp({std::string(domain)});
  std::string state, detail;
  absl::StatusOr<postgres::PgResult> r = ExecControl(
      postgres::FenceNextSql(options_.fence_schema),
      {std::string(domain), absl::StrCat(at_least)}, &state, &detail);
  if (!r.ok()) {
    if (state == "22003") {  // numeric_value_out_of_range: at 2^63-1.
      return absl::OutOfRangeError(absl::StrCat(
          "domain \"", domain,
          "\": the database's fence is at 2^63-1, no higher token fits"));
    }
    return r.status();
  }
  uint64_t next = 0;
  if (PQntuples(r->get()) != 1 ||
      !absl::SimpleAtoi(PQgetvalue(r->get(), 0, 0), &next) || next < at_least) {
    return absl::InternalError(
        absl::StrCat("postgres ", options_.redacted_uri,
                     ": fence_next() answered something other than a token"));
  }
  return next;
}

absl::StatusOr<uint64_t> PostgresAdapter::ReadFence(absl::string_view domain) {
  std::string state, detail;
  absl::StatusOr<postgres::PgResult> r =
      ExecControl(postgres::ReadFenceSql(options_.fence_schema),
                  {std::string(domain)}, &state, &detail);
  if (!r.ok()) {
    if (r.status().code() == absl::StatusCode::kUnavailable) return r.status();
    return absl::Status(
        r.status().code(),
        absl::StrCat("reading the fence table: ", r.status().message()));
  }
  if (PQntuples(r->get()) == 0) return 0;
  uint64_t token = 0;
  if (!absl::SimpleAtoi(PQgetvalue(r->get(), 0, 0), &token)) {
    return absl::DataLossError(
        absl::StrCat("the fence table holds \"", PQgetvalue(r->get(), 0, 0),
                     "\" for domain \"", domain, "\": not a token"));
  }
  return token;
}

absl::Status PostgresAdapter::ReadFences(
    absl::FunctionRef<void(absl::string_view domain, uint64_t token)> fn) {
  std::string state, detail;
  absl::StatusOr<postgres::PgResult> r = ExecControl(
      postgres::ReadFencesSql(options_.fence_schema), {}, &state, &detail);
  if (!r.ok()) {
    if (r.status().code() == absl::StatusCode::kUnavailable) return r.status();
    return absl::Status(
        r.status().code(),
        absl::StrCat("reading the fence table: ", r.status().message()));
  }
  const int rows = PQntuples(r->get());
  for (int i = 0; i < rows; ++i) {
    uint64_t token = 0;
    if (!absl::SimpleAtoi(PQgetvalue(r->get(), i, 1), &token)) {
      return absl::DataLossError(
          absl::StrCat("postgres ", options_.redacted_uri, ": fence of \"",
                       PQgetvalue(r->get(), i, 0), "\" is not a token"));
    }
    fn(absl::string_view(PQgetvalue(r->get(), i, 0),
                         PQgetlength(r->get(), i, 0)),
       token);
  }
  return absl::OkStatus();
}

}  // namespace fencegate
