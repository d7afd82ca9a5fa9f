// Copyright fencegate authors.
//
// ZooKeeperSession (internal to fencegate): one ZooKeeper session of the C
// client (zookeeper_mt), its state as the client's event thread reports it,
// and the few helpers the token source and the gateway's watcher share.
// Watch events bump a change counter that a waiter can block on, and the
// paths of znode events are handed to an optional callback.
//
// Thread safety: safe for concurrent use. The C client's calls on handle()
// are thread safe too (the multi-threaded library).

#ifndef CLIENT_ZOOKEEPER_ZOOKEEPER_SESSION_H_
#define CLIENT_ZOOKEEPER_ZOOKEEPER_SESSION_H_

#include <zookeeper/zookeeper.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace fencegate::client::zookeeper_internal {

// The prefix of the lock recipe's ephemeral sequential znodes.
inline constexpr char kLockNodePrefix[] = "lock-";

// Whether a child's name is a lock recipe's node: "lock-" and a ten-digit
// sequence number at its end, after nothing or after a "-" (Curator's
// protected names, "_c_<uuid>-lock-0000000001").
bool IsLockNode(absl::string_view name);

class ZooKeeperSession {
 public:
  // Told the path of each watched znode's event (a child added or removed,
  // the znode deleted or changed), on the C client's event thread.
  using NodeEvent = std::function<void(const std::string& path)>;

  // Opens a session with `timeout` (the server may change it, see
  // agreed_timeout()) and waits up to `connect_timeout` for it. UNAVAILABLE
  // if no session could be had in time; INVALID_ARGUMENT if the C client
  // refuses `hosts`.
  static absl::StatusOr<std::unique_ptr<ZooKeeperSession>> Open(
      const std::string& hosts, absl::Duration timeout,
      absl::Duration connect_timeout, NodeEvent on_node_event = nullptr);
  ~ZooKeeperSession();  // Closes the session: its ephemeral znodes go.

  zhandle_t* handle() const { return handle_; }
  // The session timeout the server agreed to.
  absl::Duration agreed_timeout() const;

  // Waits until a watch fires (or the session changes) after `seen`
  // changes, or until `deadline`.
  void WaitForChange(uint64_t seen, absl::Time deadline);
  uint64_t changes();
  // Wakes WaitForChange().
  void Poke();
  bool connected();
  bool expired();
  // True once the session expired, or was disconnected for `ttl`.
  bool Gone(absl::Duration ttl);

 private:
  ZooKeeperSession() = default;
  static void OnEvent(zhandle_t*, int type, int state, const char* path,
                      void* context);

  zhandle_t* handle_ = nullptr;
  NodeEvent on_node_event_;
  absl::Mutex mu_;
  bool connected_ ABSL_GUARDED_BY(mu_) = false;
  bool expired_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time disconnected_since_ ABSL_GUARDED_BY(mu_);
  uint64_t changes_ ABSL_GUARDED_BY(mu_) = 0;
};

// A C client error as a status naming `what` and `path`: UNAVAILABLE for a
// lost connection, a timeout or an expired session, INTERNAL otherwise.
absl::Status ZkError(int rc, absl::string_view what, absl::string_view path);

// The lock znodes (IsLockNode) among `children`, oldest (lowest sequence
// number) first.
std::vector<std::string> LockNodes(const String_vector& children);

// Waits until the server this session talks to has caught up with the
// leader (zoo_async, ZooKeeper's "sync"), so that a read after it sees every
// write committed before it. Up to `timeout`.
absl::Status SyncWithLeader(zhandle_t* zh, const std::string& path,
                            absl::Duration timeout);

}  // namespace fencegate::client::zookeeper_internal

#endif  // CLIENT_ZOOKEEPER_ZOOKEEPER_SESSION_H_
