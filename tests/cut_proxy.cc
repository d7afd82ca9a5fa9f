// Copyright fencegate authors.

#include "tests/cut_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace fencegate::testing {
namespace {

sockaddr_in Loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

}  // namespace

CutProxy::~CutProxy() {
  stopping_.store(true);
  if (listen_fd_ >= 0) ::shutdown(listen_fd_, SHUT_RDWR);
  if (acceptor_.joinable()) acceptor_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  CutAll();
  absl::MutexLock lock(&mu_);
  for (std::unique_ptr<Link>& link : links_) {
    if (link->up.joinable()) link->up.join();
    if (link->down.joinable()) link->down.join();
    ::close(link->client);
    ::close(link->server);
  }
}

absl::Status CutProxy::Start(int target_port) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in any = Loopback(0);
  socklen_t len = sizeof(any);
  if (listen_fd_ < 0 ||
      ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&any), sizeof(any)) != 0 ||
      ::listen(listen_fd_, 16) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&any), &len) != 0) {
    return absl::InternalError(
        absl::StrCat("proxy: cannot listen: ", std::strerror(errno)));
  }
  port_ = ntohs(any.sin_port);
  acceptor_ = std::thread([this, target_port] {
    while (!stopping_.load()) {
      const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) {
        if (errno == EINTR) continue;
        return;  // Shut down.
      }
      const int server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in target = Loopback(target_port);
      if (server < 0 || ::connect(server, reinterpret_cast<sockaddr*>(&target),
                                  sizeof(target)) != 0) {
        ::close(client);
        if (server >= 0) ::close(server);
        continue;
      }
      auto link = std::make_unique<Link>();
      link->client = client;
      link->server = server;
      link->up = std::thread([this, client, server] {
        Pump(client, server, /*drop_if_held=*/false);
      });
      link->down = std::thread([this, client, server] {
        Pump(server, client, /*drop_if_held=*/true);
      });
      absl::MutexLock lock(&mu_);
      links_.push_back(std::move(link));
    }
  });
  return absl::OkStatus();
}

void CutProxy::Pump(int from, int to, bool drop_if_held) {
  char buf[16384];
  while (true) {
    const ssize_t n = ::recv(from, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (drop_if_held && hold_.load()) continue;
    ssize_t sent = 0;
    while (sent < n) {
      const ssize_t m = ::send(to, buf + sent, n - sent, MSG_NOSIGNAL);
      if (m < 0 && errno == EINTR) continue;
      if (m <= 0) break;
      sent += m;
    }
    if (sent < n) break;
  }
  // One side ended: end both, as a broken network path would.
  ::shutdown(from, SHUT_RDWR);
  ::shutdown(to, SHUT_RDWR);
}

void CutProxy::CutAll() {
  absl::MutexLock lock(&mu_);
  for (std::unique_ptr<Link>& link : links_) {
    ::shutdown(link->client, SHUT_RDWR);
    ::shutdown(link->server, SHUT_RDWR);
  }
}

}  // namespace fencegate::testing
