// Copyright fencegate authors.
//
// Process fixtures shared by the tests and the benchmark harness (no
// GoogleTest dependency): a real fencegate process on a free port, running
// commands, and waiting on conditions.

#ifndef TESTS_FIXTURES_H_
#define TESTS_FIXTURES_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace fencegate::testing {

// Reads a whole file; NOT_FOUND if it cannot be read.
absl::StatusOr<std::string> ReadFile(const std::string& path);
// Writes `data` to `path`, aborting on failure.
void WriteFileOrDie(const std::string& path, const std::string& data);

// Polls `condition` until true or `timeout` passes. For waiting on another
// process (a port file, a log line), never for ordering threads.
bool WaitFor(const std::function<bool()>& condition,
             absl::Duration timeout = absl::Seconds(30));

// A fencegate server process started from the build tree, on a free port.
class GatewayProcess {
 public:
  // Starts fencegate --data_dir=data_dir --listen=127.0.0.1:0 plus `args`,
  // and waits until it serves. Its stderr goes to log_path(), or to
  // `stderr_fd` if that is not -1.
  static absl::StatusOr<std::unique_ptr<GatewayProcess>> Start(
      const std::string& data_dir, const std::vector<std::string>& args = {},
      int stderr_fd = -1);
  ~GatewayProcess();  // SIGKILLs the process if still running.

  int port() const { return port_; }
  std::string address() const;
  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }

  // Sends `sig`, then waits for exit; returns the wait status.
  int Stop(int sig);

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::string log_path_;
};

// A TCP port on 127.0.0.1 that was free a moment ago (bound to 0, then
// closed); 0 if none could be found.
int FreeLoopbackPort();

// A field of /proc/PID/status in kB ("VmRSS", "VmHWM"; pid 0: this
// process), or -1 if it cannot be read.
int64_t ProcStatusKb(pid_t pid, const std::string& field);

// Starts a server process: `argv` (argv[0] a path) with stdout and stderr
// appended to `log_path`, killed with SIGKILL should the calling thread
// die. Returns its pid, or -1 if fork failed.
pid_t SpawnServer(std::vector<std::string> argv, const std::string& log_path);

// A TCP connection to 127.0.0.1:`port` (a blocking socket the caller
// closes); -1 if it cannot connect.
int ConnectLoopback(int port);

// Runs a command (argv[0] is a path), capturing stdout; returns the exit
// code, or -1 if it did not exit normally.
int RunCommand(const std::vector<std::string>& argv, std::string* out,
               std::string* err = nullptr);

// psql against a PostgreSQL protocol port on 127.0.0.1:`port`, as user
// "worker" on `database`, with `env` (NAME=VALUE) set and one -c for each
// of `sql`: unaligned, tuples only, stopping at the first error, errors
// with their SQLSTATE. Its exit code; what it printed in `out` and `err`.
int RunPsql(int port, const std::string& database,
            const std::vector<std::string>& env,
            const std::vector<std::string>& sql, std::string* out,
            std::string* err);

}  // namespace fencegate::testing

#endif  // TESTS_FIXTURES_H_
