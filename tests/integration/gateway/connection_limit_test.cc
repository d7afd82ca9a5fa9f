// Copyright fencegate authors.
//
// max_connections: ConnectionLimit on a listener of the test's own, through
// the accept4 this process gets from the gateway library, and a gateway
// process refusing the connection past its limit.

#include "gateway/connection_limit.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "fencegate/v1/gateway.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "observability/log.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

// A file descriptor closed when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Fd& operator=(Fd&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// A non-blocking TCP listener on 127.0.0.1 and a free port, as gRPC's.
Fd Listen(int* port) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)),
            0);
  EXPECT_EQ(::listen(fd.get(), 16), 0);
  socklen_t len = sizeof(addr);
  EXPECT_EQ(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len),
            0);
  *port = ntohs(addr.sin_port);
  return fd;
}

Fd Connect(int port) {
  Fd fd(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  EXPECT_EQ(
      ::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
      << std::strerror(errno);
  return fd;
}

// Connections waiting in `listen_fd`'s accept queue.
int Queued(int listen_fd) {
  tcp_info info{};
  socklen_t len = sizeof(info);
  EXPECT_EQ(::getsockopt(listen_fd, IPPROTO_TCP, TCP_INFO, &info, &len), 0);
  return static_cast<int>(info.tcpi_unacked);  // For a listener: its queue.
}

// `n` connections to `port`, once all are in `listen_fd`'s accept queue
// (the handshake's last step may be finished by the kernel after connect()
// returns), which was empty.
std::vector<Fd> ConnectQueued(int listen_fd, int port, int n) {
  std::vector<Fd> clients;
  for (int i = 0; i < n; ++i) clients.push_back(Connect(port));
  EXPECT_TRUE(testing::WaitFor([&] { return Queued(listen_fd) >= n; }));
  return clients;
}

// Accepts through the process's accept4, as gRPC does; -1 with errno
// EAGAIN when no connection is waiting.
int Accept(int listen_fd) {
  return ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
}

// Whether the peer closed `fd`: a read sees end of file or a reset (not
// the 5 s timeout).
bool ClosedByPeer(int fd) {
  timeval timeout{};
  timeout.tv_sec = 5;
  EXPECT_EQ(
      ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout)), 0);
  char byte;
  const ssize_t n = ::recv(fd, &byte, 1, 0);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

TEST(ConnectionLimitTest, ClosesConnectionsPastTheLimitAndCountsClosesOut) {
  int port = 0;
  Fd listener = Listen(&port);
  ASSERT_OK_AND_ASSIGN(
      limit, ConnectionLimit::Install(port, 2, {}, absl::ZeroDuration()));

  std::vector<Fd> clients = ConnectQueued(listener.get(), port, 4);
  Fd first(Accept(listener.get()));
  Fd second(Accept(listener.get()));
  ASSERT_GE(first.get(), 0);
  ASSERT_GE(second.get(), 0);
  EXPECT_EQ(limit->Open(), 2u);
  // The third and fourth are closed, and the listener is left with nothing
  // waiting.
  errno = 0;
  EXPECT_EQ(Accept(listener.get()), -1);
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_EQ(limit->refused(), 2u);
  EXPECT_TRUE(ClosedByPeer(clients[2].get()));
  EXPECT_TRUE(ClosedByPeer(clients[3].get()));

  // A closed connection no longer counts, even when its descriptor number
  // is taken by another file in between.
  const int freed = first.get();
  first = Fd();
  Fd reused(::dup2(listener.get(), freed));
  ASSERT_EQ(reused.get(), freed);
  std::vector<Fd> fifth_client = ConnectQueued(listener.get(), port, 1);
  Fd fifth(Accept(listener.get()));
  EXPECT_GE(fifth.get(), 0);
  EXPECT_EQ(limit->Open(), 2u);
  EXPECT_EQ(limit->refused(), 2u);
}

TEST(ConnectionLimitTest, OtherPortsAndUninstalledLimitsPassThrough) {
  int limited_port = 0;
  Fd limited = Listen(&limited_port);
  int other_port = 0;
  Fd other = Listen(&other_port);
  ASSERT_OK_AND_ASSIGN(limit, ConnectionLimit::Install(limited_port, 1, {}));
  EXPECT_EQ(ConnectionLimit::Install(limited_port, 5, {}).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(ConnectionLimit::Install(limited_port + 1, 0, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // The refused second Install left the first in force.
  std::vector<Fd> limited_clients =
      ConnectQueued(limited.get(), limited_port, 2);
  Fd kept(Accept(limited.get()));
  EXPECT_GE(kept.get(), 0);
  EXPECT_EQ(Accept(limited.get()), -1);
  EXPECT_EQ(limit->refused(), 1u);
  kept = Fd();

  std::vector<Fd> clients = ConnectQueued(other.get(), other_port, 3);
  std::vector<Fd> accepted;
  for (int i = 0; i < 3; ++i) {
    accepted.emplace_back(Accept(other.get()));
    EXPECT_GE(accepted.back().get(), 0);
  }

  limit.reset();
  for (Fd& client : ConnectQueued(limited.get(), limited_port, 3)) {
    clients.push_back(std::move(client));
  }
  for (int i = 0; i < 3; ++i) {
    accepted.emplace_back(Accept(limited.get()));
    EXPECT_GE(accepted.back().get(), 0);
  }
}

// The highest descriptor open in this process.
int HighestOpenFd() {
  int highest = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator("/proc/self/fd")) {
    int fd = 0;
    if (absl::SimpleAtoi(entry.path().filename().string(), &fd)) {
      highest = std::max(highest, fd);
    }
  }
  return highest;
}

// Out of descriptors, gRPC 1.51's listener would stop for good on EMFILE:
// the connection waiting is taken with the spare descriptor and closed, and
// the caller gets EAGAIN; once descriptors are free again, connections are
// accepted as before.
TEST(ConnectionLimitTest, OutOfDescriptorsTheWaitingConnectionIsClosed) {
  int port = 0;
  Fd listener = Listen(&port);
  ASSERT_OK_AND_ASSIGN(limit, ConnectionLimit::Install(port, 100, {}));
  std::vector<Fd> clients = ConnectQueued(listener.get(), port, 2);
  // The log's writer thread starts with the first line: before the
  // descriptors run out, where UBSan could not check the new thread's first
  // (virtual) call and would report it.
  Log(LogSeverity::kInfo, "connection limit test: exhausting descriptors");

  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = HighestOpenFd() + 8;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<Fd> filler;
  for (int fd; (fd = ::open("/dev/null", O_RDONLY)) >= 0;) {
    filler.emplace_back(fd);
  }
  ASSERT_EQ(errno, EMFILE);
  errno = 0;
  const int accepted = Accept(listener.get());
  const int accept_errno = errno;
  filler.clear();
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);

  EXPECT_EQ(accepted, -1);
  EXPECT_EQ(accept_errno, EAGAIN) << std::strerror(accept_errno);
  EXPECT_EQ(limit->refused_for_descriptors(), 2u);
  EXPECT_TRUE(ClosedByPeer(clients[0].get()));
  EXPECT_TRUE(ClosedByPeer(clients[1].get()));
  std::vector<Fd> later = ConnectQueued(listener.get(), port, 1);
  Fd taken(Accept(listener.get()));
  EXPECT_GE(taken.get(), 0);
  EXPECT_EQ(limit->Open(), 1u);
}

// The address gRPC would name `client`'s connection by, seen from the
// server: the client's own address.
std::string PeerName(int client) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  EXPECT_EQ(::getsockname(client, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  return absl::StrCat("ipv4:127.0.0.1:", ntohs(addr.sin_port));
}

// Whether `fd` is still open from its peer's side: nothing to read yet.
bool StillOpen(int fd) {
  char byte;
  const ssize_t n = ::recv(fd, &byte, 1, MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

// At the limit, a newcomer sheds the oldest connection that has made no
// RPC while the unproven ones hold at least their share; a connection that
// has made one (MarkProven) is never shed; with fewer unproven than the
// share, the newcomer is refused as before.
TEST(ConnectionLimitTest, UnprovenConnectionsMakeRoomAndProvenOnesStay) {
  int port = 0;
  Fd listener = Listen(&port);
  ASSERT_OK_AND_ASSIGN(
      limit, ConnectionLimit::Install(port, 4, {}, absl::ZeroDuration(),
                                      /*unproven_share=*/2));
  std::vector<Fd> clients = ConnectQueued(listener.get(), port, 4);
  std::vector<Fd> accepted;
  for (int i = 0; i < 4; ++i) {
    accepted.emplace_back(Accept(listener.get()));
    ASSERT_GE(accepted.back().get(), 0);
  }
  limit->MarkProven(PeerName(clients[1].get()));
  limit->MarkProven(PeerName(clients[2].get()));
  limit->MarkProven("ipv4:127.0.0.1:1");  // No such connection: ignored.

  // Unproven: the first and the fourth, the share: the first is shed.
  std::vector<Fd> fifth = ConnectQueued(listener.get(), port, 1);
  accepted.emplace_back(Accept(listener.get()));
  ASSERT_GE(accepted.back().get(), 0);
  EXPECT_EQ(limit->shed(), 1u);
  EXPECT_TRUE(ClosedByPeer(clients[0].get()));
  EXPECT_EQ(limit->Open(), 4u);

  // The fourth and the fifth are unproven: the fourth goes next.
  std::vector<Fd> sixth = ConnectQueued(listener.get(), port, 1);
  accepted.emplace_back(Accept(listener.get()));
  ASSERT_GE(accepted.back().get(), 0);
  EXPECT_EQ(limit->shed(), 2u);
  EXPECT_TRUE(ClosedByPeer(clients[3].get()));

  // With one unproven left, below the share, a newcomer is refused.
  limit->MarkProven(PeerName(fifth[0].get()));
  std::vector<Fd> seventh = ConnectQueued(listener.get(), port, 1);
  errno = 0;
  EXPECT_EQ(Accept(listener.get()), -1);
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_EQ(limit->refused(), 1u);
  EXPECT_EQ(limit->shed(), 2u);
  EXPECT_TRUE(ClosedByPeer(seventh[0].get()));
  // The proven ones were never touched.
  EXPECT_TRUE(StillOpen(clients[1].get()));
  EXPECT_TRUE(StillOpen(clients[2].get()));
  EXPECT_TRUE(StillOpen(fifth[0].get()));
}

// gRPC 1.51 names an IPv6 peer as a URI, "ipv6:%5B::1%5D:<port>": the
// connection it names is proven all the same, and so is the one written
// "ipv6:[::1]:<port>". Here the first connection is proven that way, so
// the third sheds the second, not the first.
TEST(ConnectionLimitTest, AnIpv6PeerInGrpcsFormIsProven) {
  Fd listener(::socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK, 0));
  sockaddr_in6 addr{};
  addr.sin6_family = AF_INET6;
  addr.sin6_addr = in6addr_loopback;
  if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr),
             sizeof(addr)) != 0) {
    GTEST_SKIP() << "no IPv6 loopback: " << std::strerror(errno);
  }
  ASSERT_EQ(::listen(listener.get(), 16), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(
      ::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len),
      0);
  const int port = ntohs(addr.sin6_port);
  ASSERT_OK_AND_ASSIGN(
      limit, ConnectionLimit::Install(port, 2, {}, absl::ZeroDuration(),
                                      /*unproven_share=*/1));
  auto connect = [&] {
    Fd fd(::socket(AF_INET6, SOCK_STREAM, 0));
    EXPECT_EQ(
        ::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)),
        0);
    return fd;
  };
  auto peer = [](const Fd& client, bool uri) {
    sockaddr_in6 own{};
    socklen_t own_len = sizeof(own);
    EXPECT_EQ(::getsockname(client.get(), reinterpret_cast<sockaddr*>(&own),
                            &own_len),
              0);
    return absl::StrCat(uri ? "ipv6:%5B::1%5D:" : "ipv6:[::1]:",
                        ntohs(own.sin6_port));
  };
  auto accept_one = [&] {
    EXPECT_TRUE(testing::WaitFor([&] { return Queued(listener.get()) >= 1; }));
    return Fd(Accept(listener.get()));
  };
  Fd first = connect();
  Fd first_accepted = accept_one();
  ASSERT_GE(first_accepted.get(), 0);
  limit->MarkProven(peer(first, /*uri=*/true));
  EXPECT_FALSE(limit->HasUnproven());
  Fd second = connect();
  Fd second_accepted = accept_one();
  ASSERT_GE(second_accepted.get(), 0);
  EXPECT_TRUE(limit->HasUnproven());
  Fd third = connect();
  Fd third_accepted = accept_one();
  ASSERT_GE(third_accepted.get(), 0);
  EXPECT_EQ(limit->shed(), 1u);
  EXPECT_TRUE(ClosedByPeer(second.get()));
  EXPECT_TRUE(StillOpen(first.get()));
  limit->MarkProven(peer(third, /*uri=*/false));
  EXPECT_FALSE(limit->HasUnproven());
}

// A channel with a connection of its own.
std::unique_ptr<v1::Gateway::Stub> OwnConnection(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return v1::Gateway::NewStub(grpc::CreateCustomChannel(
      address, grpc::InsecureChannelCredentials(), args));
}

grpc::Status GetFence(v1::Gateway::Stub* stub) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  v1::GetFenceRequest request;
  request.set_domain("d");
  v1::FenceState state;
  return stub->GetFence(&context, request, &state);
}

TEST(ConnectionLimitTest, GatewayRefusesTheConnectionPastItsLimit) {
  testing::TempDir dir;
  ASSERT_OK_AND_ASSIGN(gateway,
                       testing::GatewayProcess::Start(dir.path() + "/data",
                                                      {"--max_connections=2"}));
  auto a = OwnConnection(gateway->address());
  auto b = OwnConnection(gateway->address());
  ASSERT_TRUE(GetFence(a.get()).ok());
  ASSERT_TRUE(GetFence(b.get()).ok());

  auto refused = OwnConnection(gateway->address());
  const grpc::Status status = GetFence(refused.get());
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << status.error_message();
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        absl::StatusOr<std::string> log =
            testing::ReadFile(gateway->log_path());
        return log.ok() && absl::StrContains(*log,
                                             "connection limit: 2 client "
                                             "connections open "
                                             "(max_connections); closed 1");
      },
      absl::Seconds(10)));
  // The connections in use keep working.
  EXPECT_TRUE(GetFence(a.get()).ok());

  // Once one closes, a new client gets in.
  a.reset();
  EXPECT_TRUE(testing::WaitFor(
      [&] { return GetFence(OwnConnection(gateway->address()).get()).ok(); },
      absl::Seconds(30)));
  EXPECT_TRUE(GetFence(b.get()).ok());
}

// A flood of connections that never send anything (about 100 a second,
// the rate that kept every slot taken before connections in their
// handshake had a share of their own) does not keep new peers out: each
// newcomer sheds the oldest silent connection and makes its RPC, and a
// connection in use is never shed.
TEST(ConnectionLimitTest, AFloodOfSilentConnectionsDoesNotKeepPeersOut) {
  testing::TempDir dir;
  ASSERT_OK_AND_ASSIGN(
      gateway, testing::GatewayProcess::Start(dir.path() + "/data",
                                              {"--max_connections=40"}));
  auto in_use = OwnConnection(gateway->address());
  ASSERT_TRUE(GetFence(in_use.get()).ok());
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(
      gateway->address().substr(gateway->address().rfind(':') + 1), &port));

  std::atomic<bool> stop{false};
  std::vector<Fd> silent;  // Only the flooder's thread touches it.
  std::thread flooder([&] {
    while (!stop.load()) {
      silent.push_back(Connect(port));
      absl::SleepFor(absl::Milliseconds(10));
    }
  });
  // Let the flood fill every slot (40 connections at 100 a second).
  absl::SleepFor(absl::Seconds(1));
  int calls = 0;
  int failed = 0;
  for (int i = 0; i < 20; ++i) {
    ++calls;
    // One retry, as a client library would make after UNAVAILABLE.
    if (!GetFence(OwnConnection(gateway->address()).get()).ok() &&
        !GetFence(OwnConnection(gateway->address()).get()).ok()) {
      ++failed;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  stop = true;
  flooder.join();
  EXPECT_EQ(failed, 0) << "of " << calls << " new peers, while "
                       << silent.size() << " silent connections were made";
  EXPECT_TRUE(GetFence(in_use.get()).ok());
}

}  // namespace
}  // namespace fencegate
