// Copyright fencegate authors.
//
// CutProxy: a TCP forwarder on loopback between a client under test and a
// real server, which can stop passing the server's replies on and then cut
// every connection. It makes "the request reached the server, which
// committed it, but the reply never came back" happen on purpose: the lost
// reply a retry has to survive.
//
// Thread safety: every method is safe to call from any thread.

#ifndef TESTS_CUT_PROXY_H_
#define TESTS_CUT_PROXY_H_

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace fencegate::testing {

class CutProxy {
 public:
  CutProxy() = default;
  CutProxy(const CutProxy&) = delete;
  CutProxy& operator=(const CutProxy&) = delete;
  // Cuts every connection and joins the proxy's threads.
  ~CutProxy();

  // Listens on 127.0.0.1 (an ephemeral port) and forwards each connection
  // to 127.0.0.1:`target_port`.
  absl::Status Start(int target_port);
  int port() const { return port_; }

  // While on, bytes from the server are read and dropped, not forwarded.
  void HoldReplies(bool on) { hold_.store(on); }
  // Closes both sides of every open connection (later ones are forwarded
  // as usual).
  void CutAll();

 private:
  struct Link {
    int client = -1;
    int server = -1;
    std::thread up, down;
  };
  void Accept();
  // Copies `from` to `to` until either ends; drops the bytes while
  // `drop_if_held` and HoldReplies is on.
  void Pump(int from, int to, bool drop_if_held);

  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> hold_{false};
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<Link>> links_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fencegate::testing

#endif  // TESTS_CUT_PROXY_H_
