// Copyright fencegate authors.
//
// No log line blocks the gateway (docs/security.md): gRPC's own log lines
// go through the gateway's log writer, which never waits for stderr. With
// stderr a pipe nobody reads and a flood of failed TLS handshakes -- each
// of which gRPC logs -- an authenticated call is still answered.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "tests/trust_fixture.h"

namespace fencegate {
namespace {

class LibraryLogsTest : public testing::TrustFixture {};

// Connects to the gateway, sends bytes that are no TLS handshake, and
// waits (up to 2 s) for the gateway to close the connection: gRPC logs a
// failed handshake. False if the gateway did not close it in time.
bool BadHandshake(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  const timeval two_seconds{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &two_seconds, sizeof(two_seconds));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok =
      ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  if (ok) {
    const std::string junk(64, 'x');
    ok = ::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL) > 0;
    char buf[256];
    // Until the gateway closes its side (it refused the handshake).
    ssize_t n = 0;
    while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) {
    }
    ok = n == 0;
  }
  ::close(fd);
  return ok;
}

TEST_F(LibraryLogsTest, AStalledStderrAndAHandshakeFloodStopNothing) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);
  // The gateway's stderr: a pipe whose reading end stays open and unread,
  // so that it fills after 64 KiB and every later write to it would block.
  StartGateway({}, pipe_fds[1]);
  ::close(pipe_fds[1]);
  ASSERT_NE(gateway_, nullptr);
  int refused = 0;
  for (int i = 0; i < 1500; ++i) {
    if (!BadHandshake(gateway_->port())) break;  // The gateway stalled.
    ++refused;
  }
  EXPECT_EQ(refused, 1500) << "the gateway stopped closing connections";
  // The call's own deadline is 10 s (GetFence).
  grpc::Status answered = GetFence(Channel(admin_), "anything");
  EXPECT_TRUE(answered.ok()) << answered.error_message();
  gateway_.reset();
  ::close(pipe_fds[0]);
}

}  // namespace
}  // namespace fencegate
