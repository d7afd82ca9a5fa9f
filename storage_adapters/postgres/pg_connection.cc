// Copyright fencegate authors.

#include "storage_adapters/postgres/pg_connection.h"

#include <poll.h>

#include <string_view>

namespace fencegate {

PgConnection::PgConnection(const std::string& conninfo)
    : pqxx::connection_base(policy_), policy_(conninfo) {
  init();
  if (raw() != nullptr)
    PQsetNoticeReceiver(raw(), &PgConnection::OnNotice, this);
}

void PgConnection::OnNotice(void* self, const PGresult* notice) {
  const char* severity =
      PQresultErrorField(notice, PG_DIAG_SEVERITY_NONLOCALIZED);
  if (severity != nullptr && (std::string_view(severity) == "FATAL" ||
                              std::string_view(severity) == "PANIC")) {
    static_cast<PgConnection*>(self)->ended_between_queries_ = true;
  }
}

PgConnection::~PgConnection() noexcept { close(); }

bool PgConnection::IdleAndAlive() {
  PGconn* c = raw();
  if (c == nullptr || PQstatus(c) != CONNECTION_OK) return false;
  if (PQtransactionStatus(c) != PQTRANS_IDLE) return false;
  pollfd pfd{PQsocket(c), POLLIN, 0};
  // Nothing arrives on an idle connection that fencegate uses (it never
  // LISTENs), except the server's goodbye -- FATAL 57P01 and then EOF, on
  // shutdown or pg_terminate_backend -- or, rarely, a parameter change. The
  // EOF may not have arrived yet, so anything at all means: do not use it.
  return ::poll(&pfd, 1, 0) == 0;
}

pqxx::connectionpolicy::handle PgConnection::Policy::do_startconnect(
    handle orig) {
  handle_ = connect_direct::do_startconnect(orig);
  return handle_;
}

pqxx::connectionpolicy::handle PgConnection::Policy::do_completeconnect(
    handle orig) {
  handle_ = connect_direct::do_completeconnect(orig);
  return handle_;
}

pqxx::connectionpolicy::handle PgConnection::Policy::do_dropconnect(
    handle orig) noexcept {
  handle_ = connect_direct::do_dropconnect(orig);
  return handle_;
}

pqxx::connectionpolicy::handle PgConnection::Policy::do_disconnect(
    handle orig) noexcept {
  handle_ = connect_direct::do_disconnect(orig);
  return handle_;
}

}  // namespace fencegate
