// Copyright fencegate authors.

#include "fencegate/client/zookeeper/zookeeper_token_source.h"

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
#include "client/zookeeper/zookeeper_session.h"

namespace fencegate::client {
namespace {

using zookeeper_internal::kLockNodePrefix;
using zookeeper_internal::ZkError;
using Session = zookeeper_internal::ZooKeeperSession;

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
  std::vector<std::string> nodes = zookeeper_internal::LockNodes(children);
  deallocate_String_vector(&children);
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
    if (part.empty() || part == "." || part == ".." ||
        zookeeper_internal::IsLockNode(part)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "lock name \"", name,
          "\": its '/'-separated parts must not be empty, '.', '..' or "
          "named like a lock node (lock-NNNNNNNNNN)"));
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
  const std::string prefix = absl::StrCat(parent, "/", kLockNodePrefix);
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
  const absl::Duration agreed = (*session)->agreed_timeout();
  return std::unique_ptr<HeldLock>(new ZooKeeperLock(
      *std::move(session), name, node, token, agreed, std::move(on_lost)));
}

}  // namespace fencegate::client
