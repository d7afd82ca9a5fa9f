// Copyright fencegate authors.

#include "tests/zookeeper_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/fixtures.h"

namespace fencegate::testing {
namespace {

constexpr char kJava[] = "/usr/bin/java";
constexpr char kClassPath[] =
    "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/*";

constexpr char kMainClass[] = "org.apache.zookeeper.server.ZooKeeperServerMain";

}  // namespace

absl::StatusOr<std::unique_ptr<ZooKeeperServer>> ZooKeeperServer::Start() {
  if (::access(kJava, X_OK) != 0 ||
      !std::filesystem::exists("/usr/share/java/zookeeper.jar")) {
    return absl::UnavailableError(
        "no java or /usr/share/java/zookeeper.jar: run scripts/setup.sh");
  }
  std::unique_ptr<ZooKeeperServer> server(new ZooKeeperServer());
  const char* base = std::getenv("TMPDIR");
  std::string tmpl =
      absl::StrCat(base != nullptr && *base ? base : "/tmp", "/fgzk-XXXXXX");
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return absl::UnavailableError("mkdtemp failed");
  }
  server->dir_ = tmpl;
  const std::string log_path = server->dir_ + "/zookeeper.log";
  const std::string cfg = server->dir_ + "/zoo.cfg";
  // A port picked by FreeLoopbackPort() can be taken before ZooKeeper binds
  // it: then it exits, and other ports are tried.
  std::string failure;
  for (int attempt = 0; attempt < 3; ++attempt) {
    server->port_ = FreeLoopbackPort();
    WriteFileOrDie(cfg, absl::StrCat("tickTime=500\ndataDir=", server->dir_,
                                     "/data\nclientPort=", server->port_,
                                     "\nclientPortAddress=127.0.0.1\n"
                                     "minSessionTimeout=1000\n"
                                     "admin.enableServer=false\n"
                                     "4lw.commands.whitelist=ruok\n"));
    std::vector<std::string> argv = {kJava,      "-Xmx256m", "-cp",
                                     kClassPath, kMainClass, cfg};
    const pid_t pid = SpawnServer(argv, log_path);
    if (pid < 0) return absl::UnavailableError("fork failed");
    server->pid_ = pid;
    bool exited = false;
    const bool up = WaitFor(
        [&] {
          int status;
          if (::waitpid(pid, &status, WNOHANG) == pid) {
            exited = true;
            return true;
          }
          return server->Answers();
        },
        absl::Seconds(60));
    if (up && !exited) return server;
    absl::StatusOr<std::string> log = ReadFile(log_path);
    failure = log.ok() ? *log : "(no log)";
    if (!exited) break;  // Did not answer in time: no other port helps.
    server->pid_ = -1;
  }
  return absl::UnavailableError(
      absl::StrCat("zookeeper did not start: ", failure));
}

ZooKeeperServer::~ZooKeeperServer() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string ZooKeeperServer::endpoint() const {
  return absl::StrCat("127.0.0.1:", port_);
}

void ZooKeeperServer::Pause() { ::kill(pid_, SIGSTOP); }
void ZooKeeperServer::Resume() { ::kill(pid_, SIGCONT); }

bool ZooKeeperServer::Answers() const {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port_));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval timeout{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  bool ok = false;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::write(fd, "ruok", 4) == 4) {
    char reply[8] = {0};
    ok = ::read(fd, reply, 4) == 4 && std::string(reply, 4) == "imok";
  }
  ::close(fd);
  return ok;
}

}  // namespace fencegate::testing
