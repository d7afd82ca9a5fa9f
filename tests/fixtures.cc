// Copyright fencegate authors.

#include "tests/fixtures.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace fencegate::testing {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFileOrDie(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
  if (!out) std::abort();
}

bool WaitFor(const std::function<bool()>& condition, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (!condition()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

absl::StatusOr<std::unique_ptr<GatewayProcess>> GatewayProcess::Start(
    const std::string& data_dir, const std::vector<std::string>& args,
    int stderr_fd) {
  auto process = std::unique_ptr<GatewayProcess>(new GatewayProcess());
  std::string port_file = absl::StrCat(data_dir, ".port");
  ::unlink(port_file.c_str());
  process->log_path_ = absl::StrCat(data_dir, ".log");
  std::vector<std::string> argv = {FENCEGATE_BIN, "--listen=127.0.0.1:0",
                                   absl::StrCat("--data_dir=", data_dir),
                                   absl::StrCat("--port_file=", port_file)};
  argv.insert(argv.end(), args.begin(), args.end());
  pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    // Never outlive the test (or harness) that started it, even one that
    // crashed: an orphaned gateway would hold its pipes open.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (stderr_fd >= 0) {
      ::dup2(stderr_fd, STDERR_FILENO);
    } else {
      FILE* log = std::fopen(process->log_path_.c_str(), "a");
      if (log != nullptr) ::dup2(fileno(log), STDERR_FILENO);
    }
    std::vector<char*> c_argv;
    for (std::string& a : argv) c_argv.push_back(a.data());
    c_argv.push_back(nullptr);
    ::execv(c_argv[0], c_argv.data());
    ::_exit(127);
  }
  process->pid_ = pid;
  bool exited = false;
  bool ready = WaitFor([&] {
    int status;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      return true;
    }
    absl::StatusOr<std::string> text = ReadFile(port_file);
    return text.ok() &&
           absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &process->port_);
  });
  if (exited || !ready) {
    if (exited) process->pid_ = -1;
    absl::StatusOr<std::string> log = ReadFile(process->log_path_);
    return absl::UnavailableError(absl::StrCat("fencegate did not start: ",
                                               log.ok() ? *log : "(no log)"));
  }
  return process;
}

GatewayProcess::~GatewayProcess() {
  if (pid_ > 0) Stop(SIGKILL);
}

std::string GatewayProcess::address() const {
  return absl::StrCat("127.0.0.1:", port_);
}

int GatewayProcess::Stop(int sig) {
  if (pid_ <= 0) return -1;
  ::kill(pid_, sig);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return status;
}

int64_t ProcStatusKb(pid_t pid, const std::string& field) {
  std::ifstream status(pid == 0 ? std::string("/proc/self/status")
                                : absl::StrCat("/proc/", pid, "/status"));
  const std::string prefix = field + ":";
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    const std::string value =
        line.substr(prefix.size(), line.find("kB") - prefix.size());
    int64_t kb = 0;
    return absl::SimpleAtoi(absl::StripAsciiWhitespace(value), &kb) ? kb : -1;
  }
  return -1;
}

int FreeLoopbackPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

pid_t SpawnServer(std::vector<std::string> argv, const std::string& log_path) {
  // Everything the child needs is prepared before fork(): between fork and
  // exec only async-signal-safe calls are allowed in a threaded process.
  std::vector<char*> c_argv;
  c_argv.reserve(argv.size() + 1);
  for (std::string& a : argv) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (log >= 0) {
    ::dup2(log, STDOUT_FILENO);
    ::dup2(log, STDERR_FILENO);
  }
  ::execv(c_argv[0], c_argv.data());
  ::_exit(127);
}

int RunCommand(const std::vector<std::string>& argv, std::string* out,
               std::string* err) {
  int out_pipe[2], err_pipe[2];
  if (::pipe(out_pipe) != 0 || ::pipe(err_pipe) != 0) return -1;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(err_pipe[1], STDERR_FILENO);
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    std::vector<char*> c_argv;
    for (const std::string& a : argv)
      c_argv.push_back(const_cast<char*>(a.c_str()));
    c_argv.push_back(nullptr);
    ::execv(c_argv[0], c_argv.data());
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  auto drain = [](int fd, std::string* sink) {
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof(buf))) > 0) {
      if (sink != nullptr) sink->append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
  };
  std::thread err_reader(drain, err_pipe[0], err);
  drain(out_pipe[0], out);
  err_reader.join();
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int RunPsql(int port, const std::string& database,
            const std::vector<std::string>& env,
            const std::vector<std::string>& sql, std::string* out,
            std::string* err) {
  std::vector<std::string> argv = {"/usr/bin/env", "PGCONNECT_TIMEOUT=10"};
  argv.insert(argv.end(), env.begin(), env.end());
  for (const char* arg :
       {"psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-v",
        "VERBOSITY=verbose", "-h", "127.0.0.1", "-U", "worker"}) {
    argv.push_back(arg);
  }
  argv.push_back("-p");
  argv.push_back(absl::StrCat(port));
  argv.push_back("-d");
  argv.push_back(database);
  for (const std::string& s : sql) {
    argv.push_back("-c");
    argv.push_back(s);
  }
  out->clear();
  err->clear();
  return RunCommand(argv, out, err);
}

int ConnectLoopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace fencegate::testing
