// Copyright fencegate authors.
//
// Lock znodes made by hand, the way ZooKeeperTokenSource (and Curator) lay
// them out: an ephemeral sequential "lock-" child of "<lock_path>/<name>",
// in a session of the test's own. For the ZooKeeper watcher's tests, which
// need holders and waiters without a gateway in the way.

#ifndef TESTS_ZOOKEEPER_LOCKS_H_
#define TESTS_ZOOKEEPER_LOCKS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/zookeeper/zookeeper_session.h"

namespace fencegate::testing {

// One lock znode; its session ends (and the znode goes) with the object
// unless Delete() took it first.
class LockZnode {
 public:
  // Creates "<parent>/<prefix>NNNNNNNNNN" and the parents that are
  // missing ("lock-", or Curator's protected "_c_<uuid>-lock-").
  static absl::StatusOr<std::unique_ptr<LockZnode>> Create(
      const std::string& hosts, const std::string& parent,
      const std::string& prefix_name = "lock-") {
    using client::zookeeper_internal::ZkError;
    using client::zookeeper_internal::ZooKeeperSession;
    auto session =
        ZooKeeperSession::Open(hosts, absl::Seconds(4), absl::Seconds(10));
    if (!session.ok()) return session.status();
    zhandle_t* zh = (*session)->handle();
    std::string path;
    for (absl::string_view part :
         absl::StrSplit(parent, '/', absl::SkipEmpty())) {
      absl::StrAppend(&path, "/", part);
      const int rc = zoo_create(zh, path.c_str(), nullptr, -1,
                                &ZOO_OPEN_ACL_UNSAFE, 0, nullptr, 0);
      if (rc != ZOK && rc != ZNODEEXISTS) return ZkError(rc, "create", path);
    }
    const std::string prefix = absl::StrCat(parent, "/", prefix_name);
    char created[1024];
    Stat stat;
    const int rc =
        zoo_create2(zh, prefix.c_str(), "test", 4, &ZOO_OPEN_ACL_UNSAFE,
                    ZOO_EPHEMERAL_SEQUENTIAL, created, sizeof(created), &stat);
    if (rc != ZOK) return ZkError(rc, "create", prefix);
    std::unique_ptr<LockZnode> node(new LockZnode());
    node->session_ = *std::move(session);
    node->path_ = created;
    node->czxid_ = static_cast<uint64_t>(stat.czxid);
    return node;
  }

  uint64_t czxid() const { return czxid_; }
  const std::string& path() const { return path_; }

  absl::Status Delete() {
    const int rc = zoo_delete(session_->handle(), path_.c_str(), -1);
    if (rc != ZOK) {
      return client::zookeeper_internal::ZkError(rc, "delete", path_);
    }
    return absl::OkStatus();
  }

 private:
  LockZnode() = default;
  std::unique_ptr<client::zookeeper_internal::ZooKeeperSession> session_;
  std::string path_;
  uint64_t czxid_ = 0;
};

}  // namespace fencegate::testing

#endif  // TESTS_ZOOKEEPER_LOCKS_H_
