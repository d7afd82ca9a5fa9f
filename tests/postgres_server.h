// Copyright fencegate authors.
//
// A throwaway PostgreSQL server for integration tests: initdb into a
// temporary directory and pg_ctl start on a free loopback port, run as the
// "postgres" user when the tests run as root (PostgreSQL refuses root).

#ifndef TESTS_POSTGRES_SERVER_H_
#define TESTS_POSTGRES_SERVER_H_

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace fencegate::testing {

class PostgresServer {
 public:
  // initdb + start. UNAVAILABLE with the tool's output if either fails.
  // `fsync`: PostgreSQL's default durability; off (the tests' default), a
  // commit does not wait for the disk.
  static absl::StatusOr<std::unique_ptr<PostgresServer>> Start(
      bool fsync = false);
  bool fsync() const { return fsync_; }
  ~PostgresServer();  // Stops the server (immediate) and removes its files.

  // The unprivileged route role Start() creates and sets up with
  // `fencectl pg-setup`'s statements: it may call fencegate.fence() and use
  // every table of schema public.
  static constexpr char kWorkerRole[] = "fencegate_worker";

  // postgres://fencegate_worker@127.0.0.1:PORT/postgres plus `params` (a
  // query): a route URI.
  std::string Uri(const std::string& params = "") const;
  // The same as the superuser postgres.
  std::string AdminUri(const std::string& params = "") const;
  // The superuser's, as a libpq keyword/value string for pqxx::connection.
  std::string Conninfo() const;
  int port() const { return port_; }
  // The postmaster's pid (the parent of every backend); 0 if stopped.
  pid_t postmaster_pid() const;

  // pg_ctl stop -m fast (or -m immediate: no checkpoint, crash recovery at
  // the next start) / pg_ctl start, on the same port and data.
  absl::Status Stop(bool immediate = false);
  absl::Status Restart();

 private:
  PostgresServer() = default;
  // "start", or the stop mode: "fast" or "immediate".
  absl::Status Ctl(const std::string& action);

  std::string dir_;
  std::string bin_;
  int port_ = 0;
  bool fsync_ = false;
  bool running_ = false;
};

// The server of a whole test suite, started from its SetUpTestSuite: the
// server (the caller owns it), or null with `error` saying why. The caller
// does not ASSERT on it there: a fatal failure in SetUpTestSuite makes gtest
// skip the suite's tests, which CTest counts as skipped, not failed; each
// test checks the server instead.
PostgresServer* StartSuiteServer(std::string* error);

}  // namespace fencegate::testing

#endif  // TESTS_POSTGRES_SERVER_H_
