// Copyright fencegate authors.
//
// The fixture of the PostgreSQL port's adversarial suites
// (pg_port_hardening_test.cc, pg_port_limits_test.cc): libpq sessions and
// a raw protocol client against a gateway process on a real server.

#ifndef TESTS_PG_PORT_HARDENING_FIXTURE_H_
#define TESTS_PG_PORT_HARDENING_FIXTURE_H_

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "libpq-fe.h"
#include "pgwire/frame.h"
#include "pgwire/frontend.h"
#include "pgwire/startup.h"
#include "tests/pg_port_fixture.h"

namespace fencegate {

class PgPortHardeningTest : public PgPortTest {
 protected:
  // A libpq connection to the port; `options` as PGOPTIONS would give them.
  static PGconn* Connect(const Gateway& g, const std::string& options,
                         const std::string& database = "db") {
    const std::string conninfo = absl::StrCat("host=127.0.0.1 port=", g.pg_port,
                                              " user=worker dbname=", database,
                                              " options='", options, "'");
    return PQconnectdb(conninfo.c_str());
  }

  // Runs `sql` as a simple query; the SQLSTATE of its first error, or ""
  // if every statement succeeded. `message`: that error's text.
  static std::string Run(PGconn* c, const std::string& sql,
                         std::string* message = nullptr) {
    std::string state;
    if (PQsendQuery(c, sql.c_str()) != 1) {
      if (message != nullptr) *message = PQerrorMessage(c);
      return "send failed";
    }
    while (PGresult* r = PQgetResult(c)) {
      if (PQresultStatus(r) == PGRES_FATAL_ERROR && state.empty()) {
        const char* s = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        state = s != nullptr ? s : "no sqlstate";
        if (message != nullptr) *message = PQresultErrorMessage(r);
      }
      PQclear(r);
    }
    if (PQstatus(c) != CONNECTION_OK && state.empty()) state = "closed";
    return state;
  }

  // The gateway still serves: its process runs and a new session reads.
  static bool Serves(const Gateway& g) {
    if (kill(g.process->pid(), 0) != 0) return false;
    std::string out, err;
    return Psql(g, "", {"SELECT 1"}, &out, &err) == 0;
  }

  // `terms` terms of 1+1+...: a parse tree `terms` levels deep.
  static std::string DeepSum(int terms) {
    std::string sql = "SELECT 1";
    sql.reserve(sql.size() + 2 * static_cast<size_t>(terms));
    for (int i = 1; i < terms; ++i) sql += "+1";
    return sql;
  }
};

// A raw protocol client: what it sends goes out as it is, and it reads
// whole messages.
class RawClient {
 public:
  explicit RawClient(int port) : fd_(testing::ConnectLoopback(port)) {}
  ~RawClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool Send(const std::string& bytes) {
    return ::write(fd_, bytes.data(), bytes.size()) ==
           static_cast<ssize_t>(bytes.size());
  }
  // Signs in as worker to route db with startup `options` (none if empty);
  // what came up to ReadyForQuery (ReadToReady), or "send failed".
  std::string SignIn(const std::string& options = "") {
    pgwire::StartupMessage startup;
    startup.parameters = {{"user", "worker"}, {"database", "db"}};
    if (!options.empty()) startup.parameters.emplace_back("options", options);
    if (!Send(pgwire::EncodeStartupPacket(startup))) return "send failed";
    return ReadToReady();
  }
  // Writes `message` again and again, without reading, until the gateway
  // stops taking them (no room for 2 s) or `limit` bytes went out; the
  // bytes that went out.
  size_t SendUntilRefused(const std::string& message, size_t limit) {
    fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
    size_t sent = 0;
    std::string batch;
    while (batch.size() < 65536) batch += message;
    while (sent < limit) {
      const ssize_t n = ::write(fd_, batch.data(), batch.size());
      if (n > 0) {
        sent += static_cast<size_t>(n);
        batch = batch.substr(static_cast<size_t>(n)) +
                std::string(batch.data(), static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) break;
      pollfd p{fd_, POLLOUT, 0};
      if (::poll(&p, 1, 2000) <= 0) break;
    }
    return sent;
  }
  // The types of the messages read up to and including the next
  // ReadyForQuery, with each DataRow's first value after a 'D'; "closed"
  // if the connection ends first.
  std::string ReadToReady() {
    std::string seen;
    for (;;) {
      absl::StatusOr<std::optional<pgwire::Frame>> frame =
          pgwire::NextFrame(buffer_, 1 << 20);
      if (!frame.ok()) return seen + "bad";
      if (frame->has_value()) {
        const pgwire::Frame& f = **frame;
        seen += f.type;
        if (f.type == 'D' && f.body.size() > 6)
          seen += std::string(f.body.substr(6));
        buffer_.erase(0, f.size);
        if (f.type == 'Z') return seen;
        continue;
      }
      char chunk[4096];
      const ssize_t n = ::read(fd_, chunk, sizeof(chunk));
      if (n <= 0) return seen + "closed";
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

 private:
  int fd_;
  std::string buffer_;
};

inline std::string Messages(
    const std::vector<pgwire::FrontendMessage>& messages) {
  std::string bytes;
  for (const pgwire::FrontendMessage& m : messages) bytes += pgwire::Encode(m);
  return bytes;
}

}  // namespace fencegate

#endif  // TESTS_PG_PORT_HARDENING_FIXTURE_H_
