// Copyright fencegate authors.

#include "gateway/connection_limit.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/server_context.h"
#include "observability/log.h"
#include "platform/accept_hook.h"
#include "platform/descriptor_reserve.h"
#include "prometheus/counter.h"

namespace fencegate {
namespace {

// How often a refusal is logged at most; the ones in between are counted
// into the next line.
constexpr absl::Duration kReportEvery = absl::Seconds(10);

// The limits installed, by port, and the spare descriptor they share.
struct Registry {
  absl::Mutex mu;
  absl::flat_hash_map<int, ConnectionLimit*> limits ABSL_GUARDED_BY(mu);
  // Freed to take a connection when descriptors run out.
  platform::DescriptorReserve reserve ABSL_GUARDED_BY(mu);
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

// The peer of connection `fd` as gRPC names it in ServerContext::peer()
// ("ipv4:10.0.0.1:5000", "ipv6:[::1]:5000"; an IPv4-mapped IPv6 address
// as IPv4); empty if it has none.
std::string PeerOf(int fd) {
  sockaddr_storage peer{};
  socklen_t len = sizeof(peer);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) {
    return "";
  }
  char text[INET6_ADDRSTRLEN] = {};
  if (peer.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&peer);
    if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text)) == nullptr) {
      return "";
    }
    return absl::StrCat("ipv4:", text, ":", ntohs(in->sin_port));
  }
  if (peer.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&peer);
    if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
      if (::inet_ntop(AF_INET, &in6->sin6_addr.s6_addr[12], text,
                      sizeof(text)) == nullptr) {
        return "";
      }
      return absl::StrCat("ipv4:", text, ":", ntohs(in6->sin6_port));
    }
    if (::inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text)) == nullptr) {
      return "";
    }
    // A link-local address carries its zone, as RFC 6874 writes it.
    const std::string zone =
        in6->sin6_scope_id != 0 ? absl::StrCat("%", in6->sin6_scope_id) : "";
    return absl::StrCat("ipv6:[", text, zone, "]:", ntohs(in6->sin6_port));
  }
  return "";
}

// `peer` with its percent escapes decoded: gRPC 1.51 writes an IPv6 peer
// as a URI, "ipv6:%5B::1%5D:5000" (and a zone's "%" as "%25").
std::string DecodePeer(absl::string_view peer) {
  std::string out;
  out.reserve(peer.size());
  for (size_t i = 0; i < peer.size(); ++i) {
    int byte = 0;
    if (peer[i] == '%' && i + 2 < peer.size() &&
        absl::SimpleHexAtoi(peer.substr(i + 1, 2), &byte)) {
      out.push_back(static_cast<char>(byte));
      i += 2;
    } else {
      out.push_back(peer[i]);
    }
  }
  return out;
}

// The limit of the port `listen_fd` listens on, if any; with the registry
// locked, so that it is not destroyed meanwhile.
ConnectionLimit* LimitOf(Registry& registry, int listen_fd)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(registry.mu) {
  const int port = LocalTcpPort(listen_fd);
  if (port < 0) return nullptr;
  auto it = registry.limits.find(port);
  return it == registry.limits.end() ? nullptr : it->second;
}

// What the accept4 interposition (platform/accept_hook.h) asks: whether
// a connection is kept, which it is if its port has no limit, or its
// limit admits it.
bool Keep(int listen_fd, int fd) {
  Registry& registry = TheRegistry();
  if (registry.installed.load(std::memory_order_acquire) == 0) return true;
  absl::MutexLock lock(&registry.mu);
  ConnectionLimit* limit = LimitOf(registry, listen_fd);
  return limit == nullptr || limit->Admit(fd);
}

// accept4 on `listen_fd` failed for want of descriptors. On a limited port:
// the waiting connection taken with the spare descriptor and closed (kOne),
// or none to take (kNone).
platform::AcceptHook::ShedResult ShedForDescriptors(int listen_fd) {
  using ShedResult = platform::AcceptHook::ShedResult;
  Registry& registry = TheRegistry();
  if (registry.installed.load(std::memory_order_acquire) == 0) {
    return ShedResult::kNotMine;
  }
  absl::MutexLock lock(&registry.mu);
  ConnectionLimit* limit = LimitOf(registry, listen_fd);
  if (limit == nullptr) return ShedResult::kNotMine;
  if (!registry.reserve.TakeOneOff(listen_fd)) return ShedResult::kNone;
  limit->RefusedForDescriptors();
  return ShedResult::kOne;
}

constexpr platform::AcceptHook kLimitHook{&Keep, &ShedForDescriptors};

}  // namespace

absl::StatusOr<std::unique_ptr<ConnectionLimit>> ConnectionLimit::Install(
    int port, uint32_t max, const MetricsContext& metrics,
    absl::Duration recount_every, uint32_t unproven_share) {
  if (port < 1 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("connection limit: bad port ", port));
  }
  if (max < 1) {
    return absl::InvalidArgumentError(
        "connection limit: max_connections must be at least 1");
  }
  // gRPC's calls reach the interposition only if the executable exports it.
  if (!platform::AcceptIsInterposed()) {
    return absl::FailedPreconditionError(
        "connection limit: this executable does not export its accept4 "
        "(link with -Wl,--export-dynamic-symbol=accept4), so "
        "max_connections could not be enforced");
  }
  Registry& registry = TheRegistry();
  absl::MutexLock lock(&registry.mu);
  if (registry.limits.contains(port)) {
    return absl::AlreadyExistsError(
        absl::StrCat("connection limit: port ", port, " already has one"));
  }
  if (absl::Status s = registry.reserve.Fill(); !s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("connection limit: ", s.message()));
  }
  platform::SetAcceptHook(&kLimitHook);
  std::unique_ptr<ConnectionLimit> limit(
      new ConnectionLimit(port, max, metrics, recount_every, unproven_share));
  registry.limits.emplace(port, limit.get());
  registry.installed.store(registry.limits.size(), std::memory_order_release);
  return limit;
}

ConnectionLimit::ConnectionLimit(int port, uint32_t max,
                                 const MetricsContext& metrics,
                                 absl::Duration recount_every,
                                 uint32_t unproven_share)
    : port_(port),
      max_(max),
      recount_every_(recount_every),
      unproven_share_(unproven_share) {
  if (!metrics.enabled()) return;
  auto& refused = prometheus::BuildCounter()
                      .Name("fencegate_connections_refused_total")
                      .Help(
                          "Client connections closed at accept: because "
                          "max_connections were open (limit), or for want "
                          "of file descriptors (descriptors)")
                      .Register(*metrics.registry);
  refused_counter_ = &refused.Add({{"reason", "limit"}});
  refused_descriptors_counter_ = &refused.Add({{"reason", "descriptors"}});
  shed_counter_ = &prometheus::BuildCounter()
                       .Name("fencegate_connections_shed_total")
                       .Help(
                           "Client connections that had made no RPC, shut "
                           "down to make room for a new one at "
                           "max_connections")
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
  auto it = registry.limits.find(port_);
  if (it != registry.limits.end() && it->second == this) {
    registry.limits.erase(it);
  }
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

uint64_t ConnectionLimit::refused_for_descriptors() const {
  absl::MutexLock lock(&mu_);
  return refused_descriptors_;
}

uint64_t ConnectionLimit::shed() const {
  absl::MutexLock lock(&mu_);
  return shed_;
}

void ConnectionLimit::Prune() {
  for (auto it = open_.begin(); it != open_.end();) {
    struct stat st {};
    const bool same = ::fstat(it->first, &st) == 0 && S_ISSOCK(st.st_mode) &&
                      st.st_ino == it->second.inode;
    if (same) {
      ++it;
      continue;
    }
    if (it->second.unproven) ForgetUnproven(it->first, it->second);
    open_.erase(it++);
  }
}

void ConnectionLimit::ForgetUnproven(int fd, Connection& connection) {
  unproven_.erase(connection.order);
  auto peer = unproven_peers_.find(connection.peer);
  if (peer != unproven_peers_.end() && peer->second == fd) {
    unproven_peers_.erase(peer);
  }
  connection.unproven = false;
  connection.peer.clear();
  unproven_count_.store(unproven_.size(), std::memory_order_relaxed);
}

void ConnectionLimit::Forget(int fd) {
  auto it = open_.find(fd);
  if (it == open_.end()) return;
  if (it->second.unproven) ForgetUnproven(fd, it->second);
  open_.erase(it);
}

bool ConnectionLimit::ShedOldestUnproven() {
  if (unproven_.empty()) return false;
  const int fd = unproven_.begin()->second;
  const ino_t inode = open_[fd].inode;
  Forget(fd);
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == inode) {
    // Still that connection: end it. gRPC sees the end and closes it.
    ::shutdown(fd, SHUT_RDWR);
    ++shed_;
    if (shed_counter_ != nullptr) shed_counter_->Increment();
  }
  return true;  // Closed already, or now: its slot is free.
}

bool ConnectionLimit::HasUnproven() const {
  return unproven_count_.load(std::memory_order_relaxed) != 0;
}

void ConnectionLimit::MarkProven(absl::string_view peer) {
  if (!HasUnproven()) return;
  const std::string decoded = DecodePeer(peer);
  absl::MutexLock lock(&mu_);
  auto it = unproven_peers_.find(decoded);
  if (it == unproven_peers_.end()) return;
  const int fd = it->second;
  auto connection = open_.find(fd);
  if (connection != open_.end()) ForgetUnproven(fd, connection->second);
}

std::string ConnectionLimit::Report(absl::string_view why) {
  ++unreported_;
  const absl::Time now = absl::Now();
  if (now - last_report_ < kReportEvery) return "";
  std::string line = absl::StrCat(
      "connection limit: ", why, "; closed ", unreported_,
      " new connection(s) on port ", port_,
      " at accept since the last report (", refused_, " for max_connections, ",
      refused_descriptors_, " for file descriptors in all)");
  unreported_ = 0;
  last_report_ = now;
  return line;
}

bool ConnectionLimit::Admit(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return true;  // Nothing to count.
  std::string peer = unproven_share_ > 0 ? PeerOf(fd) : "";
  std::string report;
  {
    absl::MutexLock lock(&mu_);
    // The descriptor was free, so whatever it held before was closed.
    Forget(fd);
    if (open_.size() >= max_) {
      const absl::Time now = absl::Now();
      if (now - last_recount_ >= recount_every_) {
        Prune();
        last_recount_ = now;
      }
    }
    if (open_.size() >= max_ && unproven_share_ > 0 &&
        unproven_.size() >= unproven_share_) {
      ShedOldestUnproven();
    }
    if (open_.size() < max_) {
      if (!peer.empty()) {
        // A peer address names one open connection: an older entry for it
        // was closed (its descriptor not yet noticed).
        if (auto old = unproven_peers_.find(peer);
            old != unproven_peers_.end()) {
          Forget(old->second);
        }
      }
      Connection connection;
      connection.inode = st.st_ino;
      if (!peer.empty()) {
        connection.unproven = true;
        connection.order = next_order_++;
        connection.peer = peer;
        unproven_.emplace(connection.order, fd);
        unproven_peers_[std::move(peer)] = fd;
        unproven_count_.store(unproven_.size(), std::memory_order_relaxed);
      }
      open_[fd] = std::move(connection);
      return true;
    }
    ++refused_;
    if (refused_counter_ != nullptr) refused_counter_->Increment();
    report = Report(absl::StrCat(max_,
                                 " client connections open "
                                 "(max_connections)"));
  }
  if (!report.empty()) Log(LogSeverity::kWarning, report);
  return false;
}

void ConnectionLimit::RefusedForDescriptors() {
  std::string report;
  {
    absl::MutexLock lock(&mu_);
    ++refused_descriptors_;
    if (refused_descriptors_counter_ != nullptr) {
      refused_descriptors_counter_->Increment();
    }
    report = Report(
        "out of file descriptors (raise RLIMIT_NOFILE or lower "
        "max_connections)");
  }
  if (!report.empty()) Log(LogSeverity::kWarning, report);
}

namespace {

// Marks the call's connection proven once the call is bound to it: a call
// served on a completion queue is created before gRPC binds it, so its peer
// is known only at its first hook.
class ProveAtFirstHook final : public grpc::experimental::Interceptor {
 public:
  ProveAtFirstHook(ConnectionLimit* limit,
                   grpc::experimental::ServerRpcInfo* info)
      : limit_(limit), info_(info) {}

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (!proven_) {
      proven_ = true;
      limit_->MarkProven(info_->server_context()->peer());
    }
    methods->Proceed();
  }

 private:
  ConnectionLimit* const limit_;
  grpc::experimental::ServerRpcInfo* const info_;
  bool proven_ = false;
};

}  // namespace

grpc::experimental::Interceptor*
ProofOfCallInterceptors::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  ConnectionLimit* limit = limit_.load(std::memory_order_acquire);
  // peer() builds a string: only while some connection is unproven.
  if (limit == nullptr || !limit->HasUnproven() ||
      info->server_context() == nullptr) {
    return nullptr;  // Nothing to intercept in the call itself.
  }
  const std::string peer = info->server_context()->peer();
  if (!peer.empty()) {
    limit->MarkProven(peer);
    return nullptr;
  }
  // Not bound to its connection yet (a completion queue's call).
  return new ProveAtFirstHook(limit, info);
}

}  // namespace fencegate
