// Copyright fencegate authors.

#include "tests/postgres_server.h"

#include <glob.h>
#include <netinet/in.h>
#include <pwd.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "postgres/fence_schema.h"
#include "tests/fixtures.h"

namespace fencegate::testing {
namespace {

// Finds initdb/pg_ctl of the newest installed major version.
std::string FindBinDir() {
  glob_t g;
  std::string found;
  if (::glob("/usr/lib/postgresql/*/bin/pg_ctl", 0, nullptr, &g) == 0 &&
      g.gl_pathc > 0) {
    found = g.gl_pathv[g.gl_pathc - 1];
    found.resize(found.size() - std::string("/pg_ctl").size());
  }
  ::globfree(&g);
  return found;
}

// Runs a shell command, as the postgres user when we are root; returns its
// exit code and output.
int Shell(const std::string& command, std::string* output) {
  std::string full =
      ::geteuid() == 0
          ? absl::StrCat("runuser -u postgres -- sh -c '", command, "' 2>&1")
          : absl::StrCat("sh -c '", command, "' 2>&1");
  FILE* p = ::popen(full.c_str(), "r");
  if (p == nullptr) return -1;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) output->append(buf, n);
  return ::pclose(p);
}

}  // namespace

absl::StatusOr<std::unique_ptr<PostgresServer>> PostgresServer::Start(
    bool fsync) {
  std::unique_ptr<PostgresServer> server(new PostgresServer());
  server->fsync_ = fsync;
  server->bin_ = FindBinDir();
  if (server->bin_.empty()) {
    return absl::UnavailableError(
        "no /usr/lib/postgresql/*/bin/pg_ctl: run scripts/setup.sh");
  }
  std::string tmpl = "/tmp/fgpg-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return absl::UnavailableError("mkdtemp failed");
  }
  server->dir_ = tmpl;
  if (::geteuid() == 0) {
    passwd* pw = ::getpwnam("postgres");
    if (pw == nullptr) return absl::UnavailableError("no postgres user");
    if (::chown(server->dir_.c_str(), pw->pw_uid, pw->pw_gid) != 0) {
      return absl::UnavailableError("chown of the data directory failed");
    }
  }
  std::string out;
  int rc = Shell(absl::StrCat(server->bin_, "/initdb -D ", server->dir_,
                              "/data -U postgres --auth=trust -E UTF8 "
                              "--no-sync --locale=C.UTF-8"),
                 &out);
  if (rc != 0) return absl::UnavailableError(absl::StrCat("initdb: ", out));
  // A port picked by FreeLoopbackPort() can be taken before the postmaster
  // binds it: then it exits, and other ports are tried.
  absl::Status started;
  for (int attempt = 0; attempt < 3; ++attempt) {
    server->port_ = FreeLoopbackPort();
    started = server->Ctl("start");
    if (started.ok()) break;
  }
  if (!started.ok()) return started;
  // The route role, as docs/postgres.md sets one up: no privilege but its
  // tables' and the fence function (fencectl pg-setup, which also takes
  // TEMP from it). Tables the tests create as the superuser are granted to
  // it; it may use schema public but create nothing there.
  std::string role_out;
  rc = Shell(
      absl::StrCat(
          server->bin_, "/psql -h ", server->dir_, " -p ", server->port_,
          " -U postgres -d postgres -v ON_ERROR_STOP=1 -qc \"CREATE ROLE ",
          kWorkerRole, " LOGIN; GRANT USAGE ON SCHEMA public TO ", kWorkerRole,
          "; ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT ALL ON "
          "TABLES TO ",
          kWorkerRole,
          "; ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT ALL ON "
          "SEQUENCES TO ",
          kWorkerRole, "\""),
      &role_out);
  if (rc != 0) return absl::UnavailableError(absl::StrCat("psql: ", role_out));
  if (absl::Status s = postgres::SetUpFenceSchema(
          server->Conninfo(), postgres::kDefaultFenceSchema, kWorkerRole);
      !s.ok()) {
    return s;
  }
  return server;
}

absl::Status PostgresServer::Ctl(const std::string& action) {
  std::string out;
  std::string opts = absl::StrCat(
      "-p ", port_, " -k ", dir_,
      " -c listen_addresses=127.0.0.1 -c fsync=", fsync_ ? "on" : "off",
      " -c max_connections=200");
  int rc =
      Shell(absl::StrCat(
                bin_, "/pg_ctl -D ", dir_, "/data -l ", dir_, "/log -w -t 60 ",
                action == "start" ? absl::StrCat("-o \"", opts, "\" start")
                                  : absl::StrCat("-m ", action, " stop")),
            &out);
  if (rc != 0) {
    std::string log;
    Shell(absl::StrCat("tail -n 20 ", dir_, "/log"), &log);
    return absl::UnavailableError(
        absl::StrCat("pg_ctl ", action, ": ", out, log));
  }
  running_ = action == "start";
  return absl::OkStatus();
}

absl::Status PostgresServer::Stop(bool immediate) {
  return Ctl(immediate ? "immediate" : "fast");
}
absl::Status PostgresServer::Restart() { return Ctl("start"); }

PostgresServer::~PostgresServer() {
  if (running_) {
    std::string out;
    Shell(absl::StrCat(bin_, "/pg_ctl -D ", dir_, "/data -m immediate -w stop"),
          &out);
  }
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
}

std::string PostgresServer::Uri(const std::string& params) const {
  return absl::StrCat("postgres://", kWorkerRole, "@127.0.0.1:", port_,
                      "/postgres", params.empty() ? "" : "?", params);
}

std::string PostgresServer::AdminUri(const std::string& params) const {
  return absl::StrCat("postgres://postgres@127.0.0.1:", port_, "/postgres",
                      params.empty() ? "" : "?", params);
}

std::string PostgresServer::Conninfo() const {
  return absl::StrCat("host=127.0.0.1 port=", port_,
                      " user=postgres dbname=postgres");
}

pid_t PostgresServer::postmaster_pid() const {
  // postmaster.pid's first line is the postmaster's pid.
  std::ifstream in(absl::StrCat(dir_, "/data/postmaster.pid"));
  pid_t pid = 0;
  if (!running_ || !(in >> pid)) return 0;
  return pid;
}

PostgresServer* StartSuiteServer(std::string* error) {
  absl::StatusOr<std::unique_ptr<PostgresServer>> server =
      PostgresServer::Start();
  if (!server.ok()) {
    *error = server.status().ToString();
    return nullptr;
  }
  return server->release();
}

}  // namespace fencegate::testing
