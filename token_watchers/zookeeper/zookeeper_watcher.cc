// Copyright fencegate authors.

#include "token_watchers/zookeeper/zookeeper_watcher.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "client/zookeeper/zookeeper_session.h"
#include "fencegate/common/limits.h"
#include "token_watchers/watcher_thread.h"

namespace fencegate {
namespace {

using client::zookeeper_internal::LockNodes;
using client::zookeeper_internal::SyncWithLeader;
using client::zookeeper_internal::ZkError;
using Session = client::zookeeper_internal::ZooKeeperSession;

constexpr absl::Duration kFirstBackoff = absl::Milliseconds(100);
constexpr absl::Duration kMaxBackoff = absl::Seconds(2);
// The watcher's own session: it holds no ephemeral znodes, so its expiry
// only means reading every lock again.
constexpr absl::Duration kSessionTimeout = absl::Seconds(10);
// How many RPC timeouts a new session may take: the first session of a
// freshly started (or loaded) ZooKeeper can take seconds.
constexpr int kConnectTimeouts = 3;

// One lock's children as listed: its lock znodes, oldest first, and the
// parent's pzxid (the zxid of its newest child change).
struct Listing {
  bool exists = false;
  std::vector<std::string> locks;
  std::vector<std::string> others;
  uint64_t pzxid = 0;
};

// Lists `path`'s children, leaving a child watch on it if `watch`.
absl::StatusOr<Listing> List(zhandle_t* zh, const std::string& path,
                             bool watch) {
  String_vector children{0, nullptr};
  Stat stat;
  const int rc =
      zoo_get_children2(zh, path.c_str(), watch ? 1 : 0, &children, &stat);
  Listing listing;
  if (rc == ZNONODE) return listing;
  if (rc != ZOK) return ZkError(rc, "list", path);
  listing.exists = true;
  listing.pzxid = static_cast<uint64_t>(stat.pzxid);
  listing.locks = LockNodes(children);
  for (int i = 0; i < children.count; ++i) {
    if (!client::zookeeper_internal::IsLockNode(children.data[i])) {
      listing.others.emplace_back(children.data[i]);
    }
  }
  deallocate_String_vector(&children);
  return listing;
}

// The czxid of `path`, or 0 if it is gone.
absl::StatusOr<uint64_t> CzxidOf(zhandle_t* zh, const std::string& path) {
  Stat stat;
  const int rc = zoo_exists(zh, path.c_str(), 0, &stat);
  if (rc == ZNONODE) return 0;
  if (rc != ZOK) return ZkError(rc, "stat", path);
  return static_cast<uint64_t>(stat.czxid);
}

// Follows the lock znodes under `root` with one-shot child watches: every
// znode under it is listed with a watch, and a child event on one lists it
// again (re-arming the watch). The C client re-registers the watches by
// itself after a reconnection within the session; after the session
// expired, a new one reads everything again.
class ZooKeeperWatcher final : public TokenWatcher {
 public:
  ZooKeeperWatcher(TokenWatcherSpec spec, TokenWatcherContext context)
      : spec_(std::move(spec)), context_(std::move(context)) {
    connected_gauge_ = ExportConnected(context_.metrics, "zookeeper", synced_);
  }
  ~ZooKeeperWatcher() override { Stop(); }

  absl::string_view kind() const override { return "zookeeper"; }

  absl::Status Start() override {
    return thread_.Start("fg-zk-watch", [this] { Run(); });
  }

  void Stop() override {
    // A session waiting for a change wakes at once.
    thread_.Stop([this] {
      absl::MutexLock lock(&mu_);
      if (session_ != nullptr) session_->Poke();
    });
  }

  absl::StatusOr<LockHolder> HolderOf(const std::string& domain) override;

  bool connected() const override { return synced_.load(); }

 private:
  std::string PathOf(absl::string_view domain) const {
    return absl::StrCat(spec_.lock_path == "/" ? "" : spec_.lock_path, "/",
                        domain);
  }
  // The domain of the lock znode `path`; empty for the root itself.
  std::string DomainOf(const std::string& path) const {
    if (path.size() <= spec_.lock_path.size()) return "";
    return path.substr(spec_.lock_path == "/" ? 1 : spec_.lock_path.size() + 1);
  }
  void OnError(const absl::Status& error) {
    if (context_.on_error) context_.on_error(error);
  }
  void NoteNewest(uint64_t zxid) {
    uint64_t seen = newest_.load();
    while (zxid > seen && !newest_.compare_exchange_weak(seen, zxid)) {
    }
  }

  void Run();
  // One session, from its opening until it expires or Stop(). Sets `*read`
  // once it has read every lock. With `first`, tells thread_ how its first
  // full read went (the outcome Start() returns).
  absl::Status FollowSession(bool first, bool* read);
  // Lists `path` with a watch, reports its lock's holder, and lists the
  // znodes under it not followed yet. A path is followed once all of that
  // succeeded.
  absl::Status Scan(zhandle_t* zh, const std::string& path);
  // Creates the lock path and its parents where missing.
  absl::Status CreateLockPath(zhandle_t* zh);

  const TokenWatcherSpec spec_;
  const TokenWatcherContext context_;
  // The newest zxid seen in any answer (pzxid of a lock, czxid of a holder).
  std::atomic<uint64_t> newest_{0};
  // Set while the current session is connected and fully read.
  std::atomic<bool> synced_{false};
  std::shared_ptr<void> connected_gauge_;

  // Used by the watcher thread only.
  absl::flat_hash_set<std::string> followed_;  // Znodes with a child watch.
  absl::flat_hash_map<std::string, uint64_t> reported_;  // domain -> token

  // Taken after thread_'s lock, never before it.
  absl::Mutex mu_;
  std::shared_ptr<Session> session_ ABSL_GUARDED_BY(mu_);
  // Znodes whose children changed, from the session's event thread.
  absl::flat_hash_set<std::string> dirty_ ABSL_GUARDED_BY(mu_);
  WatcherThread thread_;
};

void ZooKeeperWatcher::Run() {
  bool read = false;
  absl::Status ended = FollowSession(/*first=*/true, &read);
  if (!read) return;  // Start() fails with `ended`.
  absl::Duration backoff = kFirstBackoff;
  while (!thread_.Stopping()) {
    OnError(ended);
    if (thread_.WaitStopped(backoff)) return;
    backoff = std::min(backoff * 2, kMaxBackoff);
    read = false;
    ended = FollowSession(/*first=*/false, &read);
    if (read) backoff = kFirstBackoff;
  }
}

absl::Status ZooKeeperWatcher::FollowSession(bool first, bool* read) {
  // Until the first read is done, every way out answers Start().
  absl::Status outcome = absl::UnavailableError("not read");
  bool answered = !first;
  absl::Cleanup answer_start = [this, &outcome, &answered] {
    if (!answered) thread_.FirstRead(outcome);
  };
  absl::StatusOr<std::unique_ptr<Session>> opened = Session::Open(
      spec_.endpoint, kSessionTimeout, spec_.rpc_timeout * kConnectTimeouts,
      [this](const std::string& path) {
        absl::MutexLock lock(&mu_);
        dirty_.insert(path);
      });
  if (!opened.ok()) return outcome = opened.status();
  std::shared_ptr<Session> session = *std::move(opened);
  // Registered unless stopped, so that Stop() always finds it to wake.
  if (!thread_.RunUnlessStopped([&] {
        absl::MutexLock lock(&mu_);
        session_ = session;
        dirty_.clear();
      })) {
    return outcome = absl::CancelledError("watcher stopped");
  }
  absl::Cleanup forget_session = [this] {
    synced_ = false;
    absl::MutexLock lock(&mu_);
    session_.reset();
  };
  zhandle_t* zh = session->handle();
  followed_.clear();
  if (absl::Status s = CreateLockPath(zh); !s.ok()) return outcome = s;
  outcome = Scan(zh, spec_.lock_path);
  if (!outcome.ok()) return outcome;
  *read = true;
  synced_ = true;
  if (!answered) {
    answered = true;
    thread_.FirstRead(outcome);
  }
  absl::Status status;
  for (;;) {
    const uint64_t seen = session->changes();
    if (thread_.Stopping()) break;
    std::vector<std::string> paths;
    {
      absl::MutexLock lock(&mu_);
      paths.assign(dirty_.begin(), dirty_.end());
      dirty_.clear();
    }
    if (session->expired()) {
      status = absl::UnavailableError(absl::StrCat(
          "zookeeper at ", spec_.endpoint,
          ": the watcher's session expired; reading every lock again"));
      break;
    }
    synced_ = session->connected();
    for (size_t i = 0; i < paths.size(); ++i) {
      if (absl::Status s = Scan(zh, paths[i]); !s.ok()) {
        // Connection lost: the C client reconnects; read these again then.
        absl::MutexLock lock(&mu_);
        dirty_.insert(paths.begin() + i, paths.end());
        status = s;
        break;
      }
    }
    if (!status.ok()) {
      // While disconnected the C client reconnects by itself, and the
      // reconnection wakes this loop: the error is no news then.
      if (session->connected()) OnError(status);
      status = absl::OkStatus();
      // From `seen`: a Poke() from Stop() since then ends the wait at once.
      session->WaitForChange(seen, absl::Now() + absl::Seconds(1));
      continue;
    }
    session->WaitForChange(seen, absl::Now() + absl::Seconds(1));
  }
  return status.ok() ? absl::CancelledError("watcher stopped") : status;
}

absl::Status ZooKeeperWatcher::CreateLockPath(zhandle_t* zh) {
  std::string prefix;
  for (absl::string_view part :
       absl::StrSplit(spec_.lock_path, '/', absl::SkipEmpty())) {
    absl::StrAppend(&prefix, "/", part);
    const int rc = zoo_create(zh, prefix.c_str(), nullptr, -1,
                              &ZOO_OPEN_ACL_UNSAFE, 0, nullptr, 0);
    if (rc != ZOK && rc != ZNODEEXISTS) return ZkError(rc, "create", prefix);
  }
  return absl::OkStatus();
}

absl::Status ZooKeeperWatcher::Scan(zhandle_t* zh, const std::string& path) {
  absl::StatusOr<Listing> listing = List(zh, path, /*watch=*/true);
  if (!listing.ok()) return listing.status();
  const std::string domain = DomainOf(path);
  if (!listing->exists && path == spec_.lock_path) {
    // The lock path itself was deleted (Curator makes its parents container
    // znodes, which ZooKeeper removes once empty): nothing would watch for
    // its return, so it is made again, and followed.
    if (absl::Status s = CreateLockPath(zh); !s.ok()) return s;
    listing = List(zh, path, /*watch=*/true);
    if (!listing.ok()) return listing.status();
  }
  if (!listing->exists) {
    // Deleted: its parent's watch covers its return.
    followed_.erase(path);
    reported_.erase(domain);
    return absl::OkStatus();
  }
  NoteNewest(listing->pzxid);
  for (const std::string& child : listing->others) {
    const std::string under = absl::StrCat(path == "/" ? "" : path, "/", child);
    if (followed_.contains(under)) continue;
    if (absl::Status s = Scan(zh, under); !s.ok()) return s;
  }
  if (listing->locks.empty()) {
    reported_.erase(domain);
    followed_.insert(path);
    return absl::OkStatus();
  }
  if (absl::Status valid = ValidateDomain(domain, "lock name"); !valid.ok()) {
    // A lock no ZooKeeperTokenSource would make: the gateway could not
    // fence it anyway.
    OnError(valid);
    followed_.insert(path);
    return absl::OkStatus();
  }
  absl::StatusOr<uint64_t> czxid =
      CzxidOf(zh, absl::StrCat(path, "/", listing->locks.front()));
  if (!czxid.ok()) return czxid.status();
  // Followed from here on: a failure above leaves it unfollowed, so that
  // the next Scan of its parent reads it again.
  followed_.insert(path);
  if (*czxid == 0) {
    // The holder went between the two reads; its deletion fired the watch
    // just set, and the next Scan finds its successor.
    return absl::OkStatus();
  }
  NoteNewest(*czxid);
  auto [last, inserted] = reported_.try_emplace(domain, *czxid);
  if (!inserted) {
    if (last->second == *czxid) return absl::OkStatus();
    last->second = *czxid;
  }
  context_.on_holder(domain, *czxid);
  return absl::OkStatus();
}

absl::StatusOr<LockHolder> ZooKeeperWatcher::HolderOf(
    const std::string& domain) {
  std::shared_ptr<Session> session;
  {
    absl::MutexLock lock(&mu_);
    session = session_;
  }
  if (session == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "the zookeeper watcher has no session with ", spec_.endpoint));
  }
  zhandle_t* zh = session->handle();
  // A read from a follower that lags the leader could miss the holder.
  if (absl::Status s = SyncWithLeader(zh, spec_.lock_path, spec_.rpc_timeout);
      !s.ok()) {
    return s;
  }
  const std::string path = PathOf(domain);
  LockHolder holder;
  for (int attempt = 0; attempt < 3; ++attempt) {
    absl::StatusOr<Listing> listing = List(zh, path, /*watch=*/false);
    if (!listing.ok()) return listing.status();
    NoteNewest(listing->pzxid);
    if (listing->locks.empty()) break;
    absl::StatusOr<uint64_t> czxid =
        CzxidOf(zh, absl::StrCat(path, "/", listing->locks.front()));
    if (!czxid.ok()) return czxid.status();
    if (*czxid == 0) continue;  // Released meanwhile: look again.
    NoteNewest(*czxid);
    holder.token = *czxid;
    break;
  }
  holder.newest = newest_.load();
  return holder;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TokenWatcher>> CreateZooKeeperWatcher(
    const TokenWatcherSpec& spec, TokenWatcherContext context) {
  TokenWatcherSpec checked = spec;
  if (checked.lock_path.empty()) checked.lock_path = "/fencegate/locks";
  if (!absl::StartsWith(checked.lock_path, "/") ||
      (checked.lock_path.size() > 1 &&
       absl::EndsWith(checked.lock_path, "/"))) {
    return absl::InvalidArgumentError(
        absl::StrCat("zookeeper watcher: lock_path \"", checked.lock_path,
                     "\": an absolute path without a trailing '/'"));
  }
  if (checked.tls.enabled()) {
    return absl::InvalidArgumentError(
        "zookeeper watcher: TLS is not supported (Debian's ZooKeeper C "
        "client is built without it)");
  }
  return std::make_unique<ZooKeeperWatcher>(std::move(checked),
                                            std::move(context));
}

}  // namespace fencegate
