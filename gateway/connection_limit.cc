// Copyright fencegate authors.

#include "gateway/connection_limit.h"

#include <dlfcn.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gateway/log.h"
#include "prometheus/counter.h"

extern "C" int accept4(int fd, sockaddr* addr, socklen_t* len, int flags);

namespace fencegate {
namespace {

// How often a refusal is logged at most; the ones in between are counted
// into the next line.
constexpr absl::Duration kReportEvery = absl::Seconds(10);

using Accept4 = int (*)(int, sockaddr*, socklen_t*, int);

// The C library's accept4 (the next definition after this one).
int RealAccept4(int fd, sockaddr* addr, socklen_t* len, int flags) {
  static const Accept4 real =
      reinterpret_cast<Accept4>(::dlsym(RTLD_NEXT, "accept4"));
  if (real == nullptr) {
    return static_cast<int>(::syscall(SYS_accept4, fd, addr, len, flags));
  }
  return real(fd, addr, len, flags);
}

// The limits installed, by port.
struct Registry {
  absl::Mutex mu;
  absl::flat_hash_map<int, ConnectionLimit*> limits ABSL_GUARDED_BY(mu);
  // limits.size(), read without the lock: accepts skip every lookup while
  // no limit is installed.
  std::atomic<size_t> installed{0};
};

Registry& TheRegistry() {
  static Registry* registry = new Registry();
  return *registry;
}

// The TCP port `fd` is bound to; -1 if it is not a TCP socket.
int LocalTcpPort(int fd) {
  sockaddr_storage local{};
  socklen_t len = sizeof(local);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) {
    return -1;
  }
  if (local.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in*>(&local)->sin_port);
  }
  if (local.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&local)->sin6_port);
  }
  return -1;
}

// Whether connection `fd`, just accepted on `listen_fd`, is kept: its port
// has no limit, or its limit admits it.
bool Keep(int listen_fd, int fd) {
  Registry& registry = TheRegistry();
  if (registry.installed.load(std::memory_order_acquire) == 0) return true;
  const int port = LocalTcpPort(listen_fd);
  if (port < 0) return true;
  absl::MutexLock lock(&registry.mu);
  auto it = registry.limits.find(port);
  return it == registry.limits.end() || it->second->Admit(fd);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ConnectionLimit>> ConnectionLimit::Install(
    int port, uint32_t max, const MetricsContext& metrics) {
  if (port < 1 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("connection limit: bad port ", port));
  }
  if (max < 1) {
    return absl::InvalidArgumentError(
        "connection limit: max_connections must be at least 1");
  }
  // The definition gRPC's accept4 is bound to must be this one.
  void* bound = ::dlsym(RTLD_DEFAULT, "accept4");
  if (bound != reinterpret_cast<void*>(&::accept4)) {
    return absl::FailedPreconditionError(
        "connection limit: accept4 is not the gateway's own in this process "
        "(another library defines it first), so max_connections cannot be "
        "enforced");
  }
  std::unique_ptr<ConnectionLimit> limit(
      new ConnectionLimit(port, max, metrics));
  Registry& registry = TheRegistry();
  absl::MutexLock lock(&registry.mu);
  if (!registry.limits.try_emplace(port, limit.get()).second) {
    return absl::AlreadyExistsError(
        absl::StrCat("connection limit: port ", port, " already has one"));
  }
  registry.installed.store(registry.limits.size(), std::memory_order_release);
  return limit;
}

ConnectionLimit::ConnectionLimit(int port, uint32_t max,
                                 const MetricsContext& metrics)
    : port_(port), max_(max) {
  if (!metrics.enabled()) return;
  refused_counter_ = &prometheus::BuildCounter()
                          .Name("fencegate_connections_refused_total")
                          .Help(
                              "Client connections closed at accept because "
                              "max_connections were open")
                          .Register(*metrics.registry)
                          .Add({});
  open_gauge_ = metrics.scrape_gauges->Add(
      "fencegate_connections_open", "Client connections open", {},
      [this] { return static_cast<double>(Open()); });
}

ConnectionLimit::~ConnectionLimit() {
  open_gauge_.reset();
  Registry& registry = TheRegistry();
  absl::MutexLock lock(&registry.mu);
  registry.limits.erase(port_);
  registry.installed.store(registry.limits.size(), std::memory_order_release);
}

size_t ConnectionLimit::Open() {
  absl::MutexLock lock(&mu_);
  Prune();
  return open_.size();
}

uint64_t ConnectionLimit::refused() const {
  absl::MutexLock lock(&mu_);
  return refused_;
}

void ConnectionLimit::Prune() {
  for (auto it = open_.begin(); it != open_.end();) {
    struct stat st {};
    const bool same = ::fstat(it->first, &st) == 0 && S_ISSOCK(st.st_mode) &&
                      st.st_ino == it->second;
    if (same) {
      ++it;
    } else {
      open_.erase(it++);
    }
  }
}

bool ConnectionLimit::Admit(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return true;  // Nothing to count.
  std::string report;
  {
    absl::MutexLock lock(&mu_);
    // The descriptor was free, so whatever it held before was closed.
    open_.erase(fd);
    if (open_.size() >= max_) Prune();
    if (open_.size() < max_) {
      open_.emplace(fd, st.st_ino);
      return true;
    }
    ++refused_;
    ++refused_unreported_;
    if (refused_counter_ != nullptr) refused_counter_->Increment();
    const absl::Time now = absl::Now();
    if (now - last_report_ >= kReportEvery) {
      report = absl::StrCat(
          "connection limit: ", max_, " client connections open on port ",
          port_, " (max_connections); closed ", refused_unreported_,
          " new connection(s) at accept since the last report");
      refused_unreported_ = 0;
      last_report_ = now;
    }
  }
  if (!report.empty()) Log(LogSeverity::kWarning, report);
  return false;
}

}  // namespace fencegate

// gRPC's listener (and every other caller in the process) comes here: see
// connection_limit.h.
extern "C" int accept4(int fd, sockaddr* addr, socklen_t* len, int flags) {
  for (;;) {
    const int accepted = fencegate::RealAccept4(fd, addr, len, flags);
    if (accepted < 0 || fencegate::Keep(fd, accepted)) return accepted;
    // Refused: close it and take the next one, so that a listener woken
    // once for several connections is not left with one waiting. With none
    // left, the caller gets EAGAIN (gRPC's listener is non-blocking).
    ::close(accepted);
  }
}
