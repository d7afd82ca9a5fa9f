// Copyright fencegate authors.

#include "client/zookeeper/zookeeper_token_source.h"

#include <zookeeper/zookeeper.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/gateway_fence.h"
#include "client/kept_lock.h"

namespace fencegate::client {
namespace {

constexpr char kNodePrefix[] = "lock-";

// One ZooKeeper session: its handle, and its state as the C client's
// completion thread reports it. Watch events on znodes bump `changes`.
class Session {
 public:
  static absl::StatusOr<std::unique_ptr<Session>> Open(
      const std::string& hosts, absl::Duration timeout,
      absl::Duration connect_timeout) {
    // The client's own log would go to stderr; its errors reach the caller
    // as statuses instead.
    zoo_set_debug_level(static_cast<ZooLogLevel>(0));
    std::unique_ptr<Session> s(new Session());
    s->handle_ =
        zookeeper_init(hosts.c_str(), &Session::OnEvent,
                       static_cast<int>(absl::ToInt64Milliseconds(timeout)),
                       nullptr, s.get(), 0);
    if (s->handle_ == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("zookeeper \"", hosts, "\": cannot start a client"));
    }
    absl::MutexLock lock(&s->mu_);
    auto connected = [&s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
      return s->connected_ || s->expired_;
    };
    if (!s->mu_.AwaitWithTimeout(absl::Condition(&connected),
                                 connect_timeout) ||
        s->expired_) {
      return absl::UnavailableError(
          absl::StrCat("zookeeper at ", hosts, ": no session within ",
                       absl::FormatDuration(connect_timeout)));
    }
    return s;
  }

  ~Session() {
    if (handle_ != nullptr) zookeeper_close(handle_);
  }

  zhandle_t* handle() const { return handle_; }

  // Waits until a watch fires (or the session changes) after `seen`
  // changes, or until `deadline`.
  void WaitForChange(uint64_t seen, absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    auto changed = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return changes_ != seen;
    };
    mu_.AwaitWithDeadline(absl::Condition(&changed), deadline);
  }
  uint64_t changes() {
    absl::MutexLock lock(&mu_);
    return changes_;
  }
  // Wakes WaitForChange().
  void Poke() {
    absl::MutexLock lock(&mu_);
    ++changes_;
  }
  // True once the session expired, or was disconnected for `ttl`.
  bool Gone(absl::Duration ttl) {
    absl::MutexLock lock(&mu_);
    return expired_ ||
           (!connected_ && absl::Now() - disconnected_since_ >= ttl);
  }

  static void OnEvent(zhandle_t*, int type, int state, const char*,
                      void* context) {
    auto* s = static_cast<Session*>(context);
    absl::MutexLock lock(&s->mu_);
    ++s->changes_;
    if (type != ZOO_SESSION_EVENT) return;
    if (state == ZOO_CONNECTED_STATE) {
      s->connected_ = true;
    } else if (state == ZOO_EXPIRED_SESSION_STATE ||
               state == ZOO_AUTH_FAILED_STATE) {
      s->connected_ = false;
      s->expired_ = true;
    } else if (s->connected_) {
      s->connected_ = false;
      s->disconnected_since_ = absl::Now();
    }
  }

 private:
  Session() = default;
  zhandle_t* handle_ = nullptr;
  absl::Mutex mu_;
  bool connected_ ABSL_GUARDED_BY(mu_) = false;
  bool expired_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time disconnected_since_ ABSL_GUARDED_BY(mu_);
  uint64_t changes_ ABSL_GUARDED_BY(mu_) = 0;
};

absl::Status ZkError(int rc, absl::string_view what, absl::string_view path) {
  const std::string message =
      absl::StrCat("zookeeper ", what, " \"", path, "\": ", zerror(rc));
  if (rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT ||
      rc == ZSESSIONEXPIRED || rc == ZCLOSING) {
    return absl::UnavailableError(message);
  }
  return absl::InternalError(message);
}

// Creates `path` and its parents as persistent znodes where missing.
absl::Status CreatePath(zhandle_t* zh, const std::string& path) {
  std::string prefix;
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    absl::StrAppend(&prefix, "/", part);
    const int rc = zoo_create(zh, prefix.c_str(), nullptr, -1,
                              &ZOO_OPEN_ACL_UNSAFE, 0, nullptr, 0);
    if (rc != ZOK && rc != ZNODEEXISTS) return ZkError(rc, "create", prefix);
  }
  return absl::OkStatus();
}

// The lock znodes under `parent`, oldest (lowest sequence) first.
absl::StatusOr<std::vector<std::string>> LockNodes(zhandle_t* zh,
                                                   const std::string& parent) {
  String_vector children{0, nullptr};
  const int rc = zoo_get_children(zh, parent.c_str(), 0, &children);
  if (rc != ZOK) return ZkError(rc, "list", parent);
  std::vector<std::string> nodes;
  for (int i = 0; i < children.count; ++i) {
    if (absl::StartsWith(children.data[i], kNodePrefix)) {
      nodes.emplace_back(children.data[i]);
    }
  }
  deallocate_String_vector(&children);
  // The sequence suffix has a fixed width: text order is creation order.
  std::sort(nodes.begin(), nodes.end());
  return nodes;
}

class ZooKeeperLock final : public HeldLock {
 public:
  ZooKeeperLock(std::unique_ptr<Session> session, std::string name,
                std::string node, uint64_t token, absl::Duration ttl,
                std::function<void()> on_lost)
      : session_(std::move(session)),
        name_(std::move(name)),
        node_(std::move(node)),
        token_(token),
        ttl_(ttl),
        on_lost_(std::move(on_lost)) {
    monitor_ = std::thread([this] { MonitorLoop(); });
  }

  ~ZooKeeperLock() override {
    if (!released_) Release().IgnoreError();  // Ephemeral: it goes anyway.
    StopMonitor();
  }

  const std::string& name() const override { return name_; }
  uint64_t token() const override { return token_; }
  bool lost() const override { return lost_.load(); }

  absl::Status Release() override {
    StopMonitor();
    released_ = true;
    const bool was_lost = lost_.exchange(true);
    const int rc = zoo_delete(session_->handle(), node_.c_str(), -1);
    if (rc == ZOK && !was_lost) return absl::OkStatus();
    if (rc == ZNONODE || rc == ZSESSIONEXPIRED || was_lost) {
      return absl::FailedPreconditionError(absl::StrCat(
          "lock \"", name_, "\" is no longer held by this holder"));
    }
    return ZkError(rc, "delete", node_);
  }

 private:
  // Every ttl/4: the session expired or stayed disconnected for the ttl, or
  // our znode is gone (a watch on it wakes the loop at once): lost.
  void MonitorLoop() {
    while (!stop_.HasBeenNotified()) {
      const uint64_t seen = session_->changes();
      // Checks our znode and watches it: its deletion wakes the loop.
      Stat stat;
      const int rc = zoo_exists(session_->handle(), node_.c_str(), 1, &stat);
      if (stop_.HasBeenNotified()) return;
      if (rc == ZNONODE || session_->Gone(ttl_)) {
        if (!lost_.exchange(true) && on_lost_) on_lost_();
        return;
      }
      session_->WaitForChange(seen, absl::Now() + ttl_ / 4);
    }
  }

  void StopMonitor() {
    if (!stop_.HasBeenNotified()) stop_.Notify();
    session_->Poke();
    if (monitor_.joinable()) monitor_.join();
  }

  const std::unique_ptr<Session> session_;
  const std::string name_;
  const std::string node_;
  const uint64_t token_;
  const absl::Duration ttl_;
  std::function<void()> on_lost_;
  std::atomic<bool> lost_{false};
  bool released_ = false;
  absl::Notification stop_;
  std::thread monitor_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ZooKeeperTokenSource>>
ZooKeeperTokenSource::Create(ZooKeeperTokenSourceOptions options) {
  if (options.hosts.empty()) {
    return absl::InvalidArgumentError("zookeeper: no hosts");
  }
  if (!absl::StartsWith(options.lock_path, "/") ||
      (options.lock_path.size() > 1 &&
       absl::EndsWith(options.lock_path, "/"))) {
    return absl::InvalidArgumentError(
        absl::StrCat("zookeeper lock_path \"", options.lock_path,
                     "\": an absolute path without a trailing '/'"));
  }
  if (options.gateway == nullptr) {
    return absl::InvalidArgumentError(
        "the zookeeper token source needs the gateway's channel");
  }
  return std::unique_ptr<ZooKeeperTokenSource>(
      new ZooKeeperTokenSource(std::move(options)));
}

ZooKeeperTokenSource::ZooKeeperTokenSource(ZooKeeperTokenSourceOptions options)
    : options_(std::move(options)) {}

ZooKeeperTokenSource::~ZooKeeperTokenSource() = default;

absl::StatusOr<std::unique_ptr<HeldLock>> ZooKeeperTokenSource::Acquire(
    const std::string& name, const LockOptions& options,
    std::function<void()> on_lost) {
  if (absl::Status s = internal::CheckLockRequest(name, options); !s.ok()) {
    return s;
  }
  for (absl::string_view part : absl::StrSplit(name, '/')) {
    if (part.empty() || part == "." || part == "..") {
      return absl::InvalidArgumentError(absl::StrCat(
          "lock name \"", name,
          "\": its '/'-separated parts must not be empty, '.' or '..'"));
    }
  }
  absl::StatusOr<std::unique_ptr<Session>> session =
      Session::Open(options_.hosts, options.ttl, options_.connect_timeout);
  if (!session.ok()) return session.status();
  zhandle_t* zh = (*session)->handle();
  const std::string parent = absl::StrCat(
      options_.lock_path == "/" ? "" : options_.lock_path, "/", name);
  if (absl::Status s = CreatePath(zh, parent); !s.ok()) return s;

  const std::string owner = options.owner;
  char created[1024];
  Stat stat;
  const std::string prefix = absl::StrCat(parent, "/", kNodePrefix);
  int rc =
      zoo_create2(zh, prefix.c_str(), owner.data(),
                  static_cast<int>(owner.size()), &ZOO_OPEN_ACL_UNSAFE,
                  ZOO_EPHEMERAL_SEQUENTIAL, created, sizeof(created), &stat);
  if (rc != ZOK) return ZkError(rc, "create", prefix);
  const std::string node = created;
  const std::string own = node.substr(parent.size() + 1);
  const uint64_t token = static_cast<uint64_t>(stat.czxid);
  auto give_up = [&](absl::Status why) {
    zoo_delete(zh, node.c_str(), -1);
    return why;
  };

  // Wait until ours is the oldest, watching only the one just before it.
  const absl::Time deadline = absl::Now() + options.wait;
  for (;;) {
    const uint64_t seen = (*session)->changes();
    absl::StatusOr<std::vector<std::string>> nodes = LockNodes(zh, parent);
    if (!nodes.ok()) return give_up(nodes.status());
    auto it = std::find(nodes->begin(), nodes->end(), own);
    if (it == nodes->end()) {
      return absl::UnavailableError(absl::StrCat(
          "lock \"", name, "\": this waiter's znode vanished (session lost)"));
    }
    if (it == nodes->begin()) break;
    const std::string predecessor = absl::StrCat(parent, "/", *(it - 1));
    Stat pred;
    rc = zoo_exists(zh, predecessor.c_str(), 1, &pred);
    if (rc == ZNONODE) continue;  // Gone already: look again.
    if (rc != ZOK) return give_up(ZkError(rc, "watch", predecessor));
    if (absl::Now() >= deadline) {
      return give_up(absl::DeadlineExceededError(absl::StrCat(
          "lock \"", name, "\" is held (znode ", nodes->front(), ")")));
    }
    (*session)->WaitForChange(seen, deadline);
  }

  // Raise the fence before the holder works.
  if (absl::Status s = internal::RaiseFence(options_.gateway, name, token);
      !s.ok()) {
    return give_up(s);
  }
  // The timeout the server agreed to (it bounds what was asked for), not
  // the one asked for: the server expires the session by it.
  const absl::Duration agreed = absl::Milliseconds(zoo_recv_timeout(zh));
  return std::unique_ptr<HeldLock>(new ZooKeeperLock(
      *std::move(session), name, node, token, agreed, std::move(on_lost)));
}

}  // namespace fencegate::client
