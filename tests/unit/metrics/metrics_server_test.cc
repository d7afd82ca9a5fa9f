// Copyright fencegate authors.
//
// The metrics endpoint cannot be blinded by clients that send half an HTTP
// request and wait (docs/security.md): a scrape is answered while more such
// connections are open than the endpoint has threads, once their read
// timeout has dropped them.

#include "metrics/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "tests/fixtures.h"
#include "tests/metrics_scrape.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

// Connects to 127.0.0.1:`port` and sends the start of a request, never its
// end. Returns the socket (-1 on failure).
int HalfSentRequest(int port) {
  const int fd = testing::ConnectLoopback(port);
  if (fd < 0) return -1;
  const std::string start = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
  if (::send(fd, start.data(), start.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(start.size())) {
    ::close(fd);
    return -1;
  }
  return fd;
}

TEST(MetricsServerTest, HalfSentRequestsDoNotBlindTheScrape) {
  ASSERT_OK_AND_ASSIGN(server, MetricsServer::Start("127.0.0.1:0"));
  // More than the endpoint's threads: only the read timeout frees them.
  std::vector<int> stalled;
  for (int i = 0; i < 2 * MetricsServer::kThreads; ++i) {
    const int fd = HalfSentRequest(server->port());
    ASSERT_GE(fd, 0);
    stalled.push_back(fd);
  }
  absl::Notification scraped;
  absl::StatusOr<std::string> body;
  std::thread scrape([&] {
    body = testing::HttpGet(server->port(), "/metrics");
    scraped.Notify();
  });
  // Two waves of stalled connections are dropped after kReadTimeout each
  // (2 s); a scrape waits far less than the 30 s a stalled request held a
  // thread for before, which is past this deadline.
  const bool answered =
      scraped.WaitForNotificationWithTimeout(absl::Seconds(20));
  for (int fd : stalled) ::close(fd);
  scrape.join();
  EXPECT_TRUE(answered) << "the scrape waited behind the half-sent requests";
  EXPECT_TRUE(body.ok()) << body.status();
}

}  // namespace
}  // namespace fencegate
