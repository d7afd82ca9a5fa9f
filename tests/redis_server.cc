// Copyright fencegate authors.

#include "tests/redis_server.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "hiredis/hiredis.h"
#include "tests/fixtures.h"

namespace fencegate::testing {

absl::StatusOr<std::unique_ptr<RedisServer>> RedisServer::Start() {
  constexpr char kBinary[] = "/usr/bin/redis-server";
  if (::access(kBinary, X_OK) != 0) {
    return absl::UnavailableError(
        "no /usr/bin/redis-server: run scripts/setup.sh");
  }
  std::unique_ptr<RedisServer> server(new RedisServer());
  const char* base = std::getenv("TMPDIR");
  std::string tmpl =
      absl::StrCat(base != nullptr && *base ? base : "/tmp", "/fgredis-XXXXXX");
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return absl::UnavailableError("mkdtemp failed");
  }
  server->dir_ = tmpl;
  const std::string log_path = server->dir_ + "/redis.log";
  for (int attempt = 0; attempt < 3; ++attempt) {
    server->port_ = FreeLoopbackPort();
    std::vector<std::string> argv = {kBinary,
                                     "--port",
                                     absl::StrCat(server->port_),
                                     "--bind",
                                     "127.0.0.1",
                                     "--save",
                                     "",
                                     "--appendonly",
                                     "no",
                                     "--daemonize",
                                     "no",
                                     "--dir",
                                     server->dir_};
    const pid_t pid = SpawnServer(argv, log_path);
    if (pid < 0) return absl::UnavailableError("fork failed");
    server->pid_ = pid;
    bool exited = false;
    const bool up = WaitFor([&] {
      int status;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        exited = true;
        return true;
      }
      absl::StatusOr<std::string> pong = server->Command({"PING"});
      return pong.ok() && *pong == "PONG";
    });
    if (up && !exited) return server;
    if (!exited) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    server->pid_ = -1;
  }
  absl::StatusOr<std::string> log = ReadFile(log_path);
  return absl::UnavailableError(absl::StrCat("redis-server did not start: ",
                                             log.ok() ? *log : "(no log)"));
}

RedisServer::~RedisServer() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string RedisServer::endpoint() const {
  return absl::StrCat("127.0.0.1:", port_);
}

absl::StatusOr<std::string> RedisServer::Command(
    const std::vector<std::string>& argv) {
  timeval timeout{2, 0};
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port_, timeout);
  if (c == nullptr || c->err != 0) {
    if (c != nullptr) redisFree(c);
    return absl::UnavailableError("cannot connect to redis");
  }
  std::vector<const char*> args;
  std::vector<size_t> lens;
  for (const std::string& a : argv) {
    args.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* reply = static_cast<redisReply*>(redisCommandArgv(
      c, static_cast<int>(args.size()), args.data(), lens.data()));
  absl::StatusOr<std::string> out;
  if (reply == nullptr) {
    out = absl::UnavailableError(c->errstr);
  } else if (reply->type == REDIS_REPLY_INTEGER) {
    out = absl::StrCat(reply->integer);
  } else if (reply->type == REDIS_REPLY_NIL) {
    out = std::string();
  } else if (reply->type == REDIS_REPLY_ERROR) {
    out = absl::InternalError(std::string(reply->str, reply->len));
  } else if (reply->str != nullptr) {
    out = std::string(reply->str, reply->len);
  } else {
    out = std::string();
  }
  if (reply != nullptr) freeReplyObject(reply);
  redisFree(c);
  return out;
}

}  // namespace fencegate::testing
