// Copyright fencegate authors.

#include "tools/fencectl/lock.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "fencegate/client/etcd/etcd_token_source.h"
#include "fencegate/client/lease_token_source.h"
#include "fencegate/client/postgres/postgres_token_source.h"
#include "fencegate/client/redis/redis_token_source.h"
#include "fencegate/client/redis/redlock_token_source.h"
#include "fencegate/client/zookeeper/zookeeper_token_source.h"
#include "grpcpp/create_channel.h"
#include "tools/fencectl/exit_codes.h"

namespace fencegate {
namespace {

// The lease being lost: the child's process group gets SIGTERM.
std::atomic<pid_t> g_child{0};

// A signal that came before the command's pid was known; sent to it then.
std::atomic<int> g_pending_signal{0};

void ForwardSignal(int sig) {
  if (pid_t child = g_child.load(); child > 0) {
    ::kill(-child, sig);
  } else {
    g_pending_signal = sig;
  }
}

}  // namespace

int RunLocked(const LockFlags& f, const std::string& name,
              const std::vector<std::string>& command) {
  if (f.ttl_ms < 100 || f.ttl_ms > 3600000 || f.wait_ms > 3600000) {
    return fencectl::UsageError(
        "--ttl-ms must be 100..3600000 and --wait-ms at most "
        "3600000");
  }
  if (!f.etcd_endpoint.empty() + !f.redis.empty() + !f.redlock.empty() +
          !f.postgres.empty() + !f.zookeeper.empty() >
      1) {
    return fencectl::UsageError(
        "lock takes one of --etcd-endpoint, --redis, --redlock, --postgres "
        "and --zookeeper");
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      client::ChannelCredentials(f.tls);
  if (!credentials.ok()) {
    return fencectl::UsageError(std::string(credentials.status().message()));
  }
  std::shared_ptr<grpc::Channel> gateway =
      grpc::CreateChannel(f.addr, *credentials);
  std::unique_ptr<client::TokenSource> source;
  if (!f.redis.empty()) {
    client::RedisTokenSourceOptions redis;
    redis.endpoint = f.redis;
    if (!f.redis_prefix.empty()) redis.prefix = f.redis_prefix;
    redis.gateway = gateway;
    absl::StatusOr<std::unique_ptr<client::RedisTokenSource>> created =
        client::RedisTokenSource::Create(std::move(redis));
    if (!created.ok()) {
      return fencectl::UsageError(std::string(created.status().message()));
    }
    source = *std::move(created);
  } else if (!f.redlock.empty()) {
    client::RedlockTokenSourceOptions redlock;
    redlock.endpoints = absl::StrSplit(f.redlock, ',');
    if (!f.redis_prefix.empty()) redlock.prefix = f.redis_prefix;
    redlock.gateway = gateway;
    absl::StatusOr<std::unique_ptr<client::RedlockTokenSource>> created =
        client::RedlockTokenSource::Create(std::move(redlock));
    if (!created.ok()) {
      return fencectl::UsageError(std::string(created.status().message()));
    }
    source = *std::move(created);
  } else if (!f.zookeeper.empty()) {
    client::ZooKeeperTokenSourceOptions zookeeper;
    zookeeper.hosts = f.zookeeper;
    zookeeper.gateway = gateway;
    absl::StatusOr<std::unique_ptr<client::ZooKeeperTokenSource>> created =
        client::ZooKeeperTokenSource::Create(std::move(zookeeper));
    if (!created.ok()) {
      return fencectl::UsageError(std::string(created.status().message()));
    }
    source = *std::move(created);
  } else if (!f.postgres.empty()) {
    client::PostgresTokenSourceOptions postgres;
    postgres.dsn = f.postgres;
    postgres.gateway = gateway;
    absl::StatusOr<std::unique_ptr<client::PostgresTokenSource>> created =
        client::PostgresTokenSource::Create(std::move(postgres));
    if (!created.ok()) {
      return fencectl::UsageError(std::string(created.status().message()));
    }
    source = *std::move(created);
  } else if (f.etcd_endpoint.empty()) {
    source = std::make_unique<client::LeaseTokenSource>(gateway);
  } else {
    client::EtcdTokenSourceOptions etcd;
    etcd.endpoint = f.etcd_endpoint;
    etcd.tls = f.etcd_tls;
    if (!f.etcd_lock_prefix.empty()) etcd.prefix = f.etcd_lock_prefix;
    absl::StatusOr<std::unique_ptr<client::EtcdTokenSource>> created =
        client::EtcdTokenSource::Create(etcd);
    if (!created.ok())
      return fencectl::UsageError(std::string(created.status().message()));
    source = *std::move(created);
  }
  client::LockOptions options;
  options.ttl = absl::Milliseconds(f.ttl_ms);
  options.wait = absl::Milliseconds(f.wait_ms);
  std::atomic<bool> lost{false};
  absl::StatusOr<std::unique_ptr<client::HeldLock>> lock =
      source->Acquire(name, options, [&lost] {
        lost = true;
        std::cerr << "fencectl: lock lost; stopping the command\n";
        if (pid_t child = g_child.load(); child > 0) ::kill(-child, SIGTERM);
      });
  if (!lock.ok()) {
    std::cerr << "fencectl: lock \"" << name
              << "\" not acquired: " << lock.status().message() << "\n";
    return absl::IsDeadlineExceeded(lock.status()) ? fencectl::kExitLock
           : absl::IsUnavailable(lock.status())    ? fencectl::kExitUnavailable
                                                   : fencectl::kExitError;
  }
  // Everything the child needs is built before fork(): between fork() and
  // exec() a multi-threaded process may only make async-signal-safe calls
  // (no allocation, no setenv, no iostreams).
  const std::vector<std::string> ours = {
      absl::StrCat("FENCEGATE_DOMAIN=", name),
      absl::StrCat("FENCEGATE_TOKEN=", (*lock)->token()),
      absl::StrCat("FENCEGATE_ADDR=", f.addr)};
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!absl::StartsWith(*e, "FENCEGATE_DOMAIN=") &&
        !absl::StartsWith(*e, "FENCEGATE_TOKEN=") &&
        !absl::StartsWith(*e, "FENCEGATE_ADDR=")) {
      envp.push_back(*e);
    }
  }
  for (const std::string& e : ours)
    envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  std::vector<char*> argv;
  for (const std::string& a : command) {
    argv.push_back(const_cast<char*>(a.c_str()));
  }
  argv.push_back(nullptr);
  const std::string cannot_run =
      absl::StrCat("fencectl: cannot run \"", command[0], "\"\n");
  // Signals meant for fencectl reach the command too, so that it never runs
  // on unsupervised after fencectl is gone. Installed before fork(), so that
  // none can kill fencectl between the two; exec() resets them in the child.
  // The child starts with them blocked and takes them back to their
  // default before it unblocks them: none is lost to the handler there.
  sigset_t forwarded, before;
  sigemptyset(&forwarded);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction action = {};
    action.sa_handler = ForwardSignal;
    ::sigaction(sig, &action, nullptr);
    sigaddset(&forwarded, sig);
  }
  ::pthread_sigmask(SIG_BLOCK, &forwarded, &before);
  pid_t pid = ::fork();
  if (pid < 0) {
    ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
    std::cerr << "fencectl: fork failed\n";
    return fencectl::kExitError;
  }
  if (pid == 0) {
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
      struct sigaction action = {};
      action.sa_handler = SIG_DFL;
      ::sigaction(sig, &action, nullptr);
    }
    ::sigprocmask(SIG_SETMASK, &before, nullptr);
    ::setpgid(0, 0);
    ::execvpe(argv[0], argv.data(), envp.data());
    ssize_t ignored =
        ::write(STDERR_FILENO, cannot_run.data(), cannot_run.size());
    (void)ignored;  // Nothing more to do about it: the child exits anyway.
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  g_child = pid;
  ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  if (int sig = g_pending_signal.exchange(0); sig != 0) ::kill(-pid, sig);
  if (lost) ::kill(-pid, SIGTERM);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_child = 0;
  // Read before releasing: a release may end the lease, which some sources
  // report as lost.
  const bool was_lost = lost || (*lock)->lost();
  absl::Status released = (*lock)->Release();
  if (was_lost) return fencectl::kExitLock;
  if (!released.ok()) {
    std::cerr << "fencectl: release failed: " << released.message() << "\n";
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

}  // namespace fencegate
