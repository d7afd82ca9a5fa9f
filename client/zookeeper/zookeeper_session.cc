// Copyright fencegate authors.

#include "client/zookeeper/zookeeper_session.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"

namespace fencegate::client::zookeeper_internal {

absl::StatusOr<std::unique_ptr<ZooKeeperSession>> ZooKeeperSession::Open(
    const std::string& hosts, absl::Duration timeout,
    absl::Duration connect_timeout, NodeEvent on_node_event) {
  // The client's own log would go to stderr; its errors reach the caller
  // as statuses instead.
  zoo_set_debug_level(static_cast<ZooLogLevel>(0));
  std::unique_ptr<ZooKeeperSession> s(new ZooKeeperSession());
  s->on_node_event_ = std::move(on_node_event);
  s->handle_ =
      zookeeper_init(hosts.c_str(), &ZooKeeperSession::OnEvent,
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
  if (!s->mu_.AwaitWithTimeout(absl::Condition(&connected), connect_timeout) ||
      s->expired_) {
    return absl::UnavailableError(
        absl::StrCat("zookeeper at ", hosts, ": no session within ",
                     absl::FormatDuration(connect_timeout)));
  }
  return s;
}

ZooKeeperSession::~ZooKeeperSession() {
  if (handle_ != nullptr) zookeeper_close(handle_);
}

absl::Duration ZooKeeperSession::agreed_timeout() const {
  return absl::Milliseconds(zoo_recv_timeout(handle_));
}

void ZooKeeperSession::WaitForChange(uint64_t seen, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto changed = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return changes_ != seen;
  };
  mu_.AwaitWithDeadline(absl::Condition(&changed), deadline);
}

uint64_t ZooKeeperSession::changes() {
  absl::MutexLock lock(&mu_);
  return changes_;
}

void ZooKeeperSession::Poke() {
  absl::MutexLock lock(&mu_);
  ++changes_;
}

bool ZooKeeperSession::connected() {
  absl::MutexLock lock(&mu_);
  return connected_;
}

bool ZooKeeperSession::expired() {
  absl::MutexLock lock(&mu_);
  return expired_;
}

bool ZooKeeperSession::Gone(absl::Duration ttl) {
  absl::MutexLock lock(&mu_);
  return expired_ || (!connected_ && absl::Now() - disconnected_since_ >= ttl);
}

void ZooKeeperSession::OnEvent(zhandle_t*, int type, int state,
                               const char* path, void* context) {
  auto* s = static_cast<ZooKeeperSession*>(context);
  if (type != ZOO_SESSION_EVENT) {
    // Before the counter moves: a waiter woken by it finds the path queued.
    if (s->on_node_event_ && path != nullptr) s->on_node_event_(path);
    absl::MutexLock lock(&s->mu_);
    ++s->changes_;
    return;
  }
  absl::MutexLock lock(&s->mu_);
  ++s->changes_;
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

absl::Status ZkError(int rc, absl::string_view what, absl::string_view path) {
  const std::string message =
      absl::StrCat("zookeeper ", what, " \"", path, "\": ", zerror(rc));
  if (rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT ||
      rc == ZSESSIONEXPIRED || rc == ZCLOSING) {
    return absl::UnavailableError(message);
  }
  return absl::InternalError(message);
}

bool IsLockNode(absl::string_view name) {
  constexpr size_t kDigits = 10;  // ZooKeeper's sequence suffix.
  constexpr size_t kSuffix = sizeof(kLockNodePrefix) - 1 + kDigits;
  if (name.size() < kSuffix) return false;
  const absl::string_view suffix = name.substr(name.size() - kSuffix);
  if (!absl::StartsWith(suffix, kLockNodePrefix)) return false;
  for (char c : suffix.substr(kSuffix - kDigits)) {
    if (c < '0' || c > '9') return false;
  }
  return name.size() == kSuffix || name[name.size() - kSuffix - 1] == '-';
}

std::vector<std::string> LockNodes(const String_vector& children) {
  std::vector<std::string> nodes;
  for (int i = 0; i < children.count; ++i) {
    if (IsLockNode(children.data[i])) nodes.emplace_back(children.data[i]);
  }
  // By the sequence number, the last ten characters (a Curator node's
  // prefix differs from one holder to the next).
  std::sort(nodes.begin(), nodes.end(),
            [](const std::string& a, const std::string& b) {
              return a.compare(a.size() - 10, 10, b, b.size() - 10, 10) < 0;
            });
  return nodes;
}

namespace {

struct SyncWait {
  absl::Notification done;
  int rc = ZOK;
};

void OnSynced(int rc, const char* /*value*/, const void* data) {
  // The completion owns one reference: the waiter may have given up.
  auto* wait = static_cast<std::shared_ptr<SyncWait>*>(const_cast<void*>(data));
  (*wait)->rc = rc;
  (*wait)->done.Notify();
  delete wait;
}

}  // namespace

absl::Status SyncWithLeader(zhandle_t* zh, const std::string& path,
                            absl::Duration timeout) {
  auto wait = std::make_shared<SyncWait>();
  auto* completion_ref = new std::shared_ptr<SyncWait>(wait);
  const int rc = zoo_async(zh, path.c_str(), &OnSynced, completion_ref);
  if (rc != ZOK) {
    delete completion_ref;
    return ZkError(rc, "sync", path);
  }
  // If this times out the completion still runs, at the latest when the
  // session closes, and drops its reference then.
  if (!wait->done.WaitForNotificationWithTimeout(timeout)) {
    return absl::UnavailableError(absl::StrCat("zookeeper sync \"", path,
                                               "\": no answer within ",
                                               absl::FormatDuration(timeout)));
  }
  if (wait->rc != ZOK) return ZkError(wait->rc, "sync", path);
  return absl::OkStatus();
}

}  // namespace fencegate::client::zookeeper_internal
