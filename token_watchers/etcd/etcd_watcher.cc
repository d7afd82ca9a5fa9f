// Copyright fencegate authors.

#include "token_watchers/etcd/etcd_watcher.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/etcd/etcd_connection.h"
#include "etcdserverpb/rpc.grpc.pb.h"
#include "fencegate/common/limits.h"
#include "fencegate/common/sync_point.h"
#include "grpcpp/support/client_callback.h"
#include "token_watchers/watcher_thread.h"

namespace fencegate {
namespace {

using client::etcd_internal::EtcdConnection;
using client::etcd_internal::PrefixEnd;

constexpr absl::Duration kFirstBackoff = absl::Milliseconds(100);
// Longest pause between reconnection attempts.
constexpr absl::Duration kMaxBackoff = absl::Seconds(2);
// Keys per Range page while reading the prefix.
constexpr int64_t kPageSize = 1000;

// The watcher's calls use gRPC's callback API, and its thread waits for them
// on absl primitives. A thread blocked in a synchronous gRPC call takes part
// in polling gRPC's sockets -- the gateway's own included -- and ends up
// reading the gateway's requests and handing each one to gRPC's callback
// threads: while a synchronous watch was open, every RPC the gateway served
// cost it about twice the CPU (docs/benchmarks.md).

// A unary Range; waits for its outcome.
grpc::Status RangeAndWait(etcdserverpb::KV::Stub& kv,
                          grpc::ClientContext* context,
                          const etcdserverpb::RangeRequest& request,
                          etcdserverpb::RangeResponse* response) {
  absl::Notification done;
  grpc::Status status;
  kv.async()->Range(context, &request, response, [&](grpc::Status s) {
    status = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  return status;
}

// One Watch stream: sends `request`, then hands each response to Read().
// One read is outstanding from the start until the stream ends, so that
// cancelling the context always ends the call.
class WatchStream final
    : public grpc::ClientBidiReactor<etcdserverpb::WatchRequest,
                                     etcdserverpb::WatchResponse> {
 public:
  WatchStream(etcdserverpb::Watch::Stub& stub, grpc::ClientContext* context,
              etcdserverpb::WatchRequest request)
      : request_(std::move(request)) {
    stub.async()->Watch(context, this);
    // Reads are started from the watcher's thread, outside the reactions:
    // the hold keeps the call alive between a read's end and the next
    // StartRead, until Read() or Finish() says no more reads will come.
    AddHold();
    StartWrite(&request_);
    StartRead(&incoming_);
    StartCall();
  }

  // Waits for the next response. False once the stream has ended; then
  // Finish() says why.
  bool Read(etcdserverpb::WatchResponse* response) {
    bool ok;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&read_done_));
      read_done_ = false;
      ok = read_ok_;
      if (ok) {
        response->Swap(&incoming_);
        incoming_.Clear();
      }
    }
    if (!ok) {
      ReleaseHold();
      return false;
    }
    StartRead(&incoming_);  // Not under mu_, which OnReadDone takes.
    return true;
  }

  // Waits until the call is over (after Read() returned false, or after
  // the context was cancelled) and returns its status. The stream may be
  // destroyed once this returns.
  grpc::Status Finish() {
    ReleaseHold();
    done_.WaitForNotification();
    return status_;
  }

  void OnReadDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    read_ok_ = ok;
    read_done_ = true;
  }
  // A failed write ends the call, and the outstanding read with it.
  void OnWriteDone(bool /*ok*/) override {}
  void OnDone(const grpc::Status& status) override {
    status_ = status;
    done_.Notify();  // Last: the stream may be destroyed from here on.
  }

 private:
  // Once no more reads will be started; the call can then end.
  void ReleaseHold() {
    if (hold_released_) return;
    hold_released_ = true;
    RemoveHold();
  }

  const etcdserverpb::WatchRequest request_;
  absl::Mutex mu_;
  etcdserverpb::WatchResponse incoming_;  // Written by gRPC while reading.
  bool read_done_ ABSL_GUARDED_BY(mu_) = false;
  bool read_ok_ ABSL_GUARDED_BY(mu_) = false;
  bool hold_released_ = false;  // Used by the watcher's thread only.
  grpc::Status status_;
  absl::Notification done_;
};

// The etcd lock recipe's view of the locks under a prefix. The keys of lock
// `name` are "<prefix>/<name>/<lease hex>" (EtcdTokenSource and `etcdctl
// lock` write them); the holder is the key with the LOWEST create_revision
// -- the rule the recipe uses -- and its token is that create_revision. Keys
// with higher revisions are waiters and are never reported: raising the
// fence to a waiter's revision would refuse the real holder's writes.
//
// Start() reads the whole prefix (Range) and reports every holder, then
// follows changes with a Watch from the revision after that read. After an
// error it reconnects with backoff and resumes from the last revision it
// applied; if etcd compacted that history away, it reads the prefix again.
// A holder that came and went inside one batch of changes may be skipped:
// the one after it has a higher token anyway.
class EtcdWatcher final : public TokenWatcher {
 public:
  EtcdWatcher(TokenWatcherSpec spec, TokenWatcherContext context)
      : spec_(std::move(spec)), context_(std::move(context)) {
    connected_gauge_ = ExportConnected(context_.metrics, "etcd", connected_);
  }
  ~EtcdWatcher() override { Stop(); }

  absl::string_view kind() const override { return "etcd"; }
  absl::Status Start() override;
  void Stop() override;
  absl::StatusOr<LockHolder> HolderOf(const std::string& name) override;
  bool connected() const override { return connected_.load(); }

 private:
  std::shared_ptr<EtcdConnection> Connection() {
    absl::MutexLock lock(&mu_);
    return connection_;
  }
  // Keys of one lock name: key -> create_revision.
  using Keys = absl::flat_hash_map<std::string, int64_t>;
  using Call = std::function<grpc::Status(grpc::ClientContext*)>;

  void Run();
  // Reads the whole prefix into names_, sets revision_ to the read's and
  // reports the owners that changed.
  absl::Status Sync();
  // Follows changes from revision_ + 1 until an error or Stop(); sets
  // `*resync` if that history was compacted away, and `*progressed` once
  // the watch is established.
  absl::Status Watch(bool* resync, bool* progressed);
  // Runs `call` with a context that Stop() cancels.
  absl::Status Cancellable(absl::Time deadline, absl::string_view what,
                           const Call& call);
  // Calls on_holder for each of `changed` whose holder differs from the
  // last one reported.
  void Report(const absl::flat_hash_set<std::string>& changed);
  // The lock name of "<prefix>/<name>/<id>"; false for any other key.
  bool NameOf(absl::string_view key, std::string* name) const;

  void OnError(const absl::Status& error) {
    if (context_.on_error) context_.on_error(error);
  }

  const TokenWatcherSpec spec_;
  const TokenWatcherContext context_;
  std::string dir_;  // "<prefix>/"
  std::shared_ptr<EtcdConnection> connection_;

  // Used by the watcher thread only.
  absl::flat_hash_map<std::string, Keys> names_;
  absl::flat_hash_map<std::string, int64_t> reported_;
  int64_t revision_ = 0;

  absl::Mutex mu_;
  // The call in progress, which Stop() cancels. Guarded by thread_'s lock
  // (RunUnlessStopped, RunLocked, Stop's wake).
  grpc::ClientContext* active_ = nullptr;
  std::atomic<bool> connected_{false};
  std::shared_ptr<void> connected_gauge_;
  WatcherThread thread_;
};

absl::Status EtcdWatcher::Start() {
  if (thread_.Stopping()) {
    return absl::FailedPreconditionError("watcher was stopped");
  }
  if (Connection() == nullptr) {
    absl::StatusOr<std::shared_ptr<EtcdConnection>> connection =
        EtcdConnection::Create(spec_.endpoint, spec_.rpc_timeout, spec_.tls);
    if (!connection.ok()) return connection.status();
    absl::string_view prefix = spec_.lock_path;
    absl::ConsumeSuffix(&prefix, "/");
    dir_ = absl::StrCat(prefix, "/");
    absl::MutexLock lock(&mu_);
    connection_ = *std::move(connection);
  }
  return thread_.Start("fg-etcd-watch", [this] { Run(); });
}

void EtcdWatcher::Stop() {
  thread_.Stop([this] {
    if (active_ != nullptr) active_->TryCancel();
  });
  connected_ = false;
}

void EtcdWatcher::Run() {
  absl::Status first = Sync();
  thread_.FirstRead(first);
  if (!first.ok()) return;
  absl::Duration backoff = kFirstBackoff;
  bool resync = false;
  while (true) {
    absl::Status status;
    if (resync) {
      status = Sync();
      if (status.ok()) {
        resync = false;
        backoff = kFirstBackoff;
      }
    }
    if (status.ok()) {
      bool progressed = false;
      status = Watch(&resync, &progressed);
      if (progressed) backoff = kFirstBackoff;
    }
    if (thread_.Stopping()) return;
    connected_ = false;
    OnError(status);
    if (thread_.WaitStopped(backoff)) return;
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

absl::Status EtcdWatcher::Cancellable(absl::Time deadline,
                                      absl::string_view what,
                                      const Call& call) {
  grpc::ClientContext context;
  EtcdConnection::Prepare(&context, deadline);
  if (!thread_.RunUnlessStopped([&] { active_ = &context; })) {
    return absl::CancelledError("watcher stopped");
  }
  grpc::Status status = call(&context);
  thread_.RunLocked([&] { active_ = nullptr; });
  return connection_->ToStatus(status, what);
}

absl::Status EtcdWatcher::Sync() {
  absl::flat_hash_map<std::string, Keys> names;
  int64_t revision = 0;
  std::string start = dir_;
  const std::string end = PrefixEnd(dir_);
  while (true) {
    etcdserverpb::RangeRequest request;
    request.set_key(start);
    request.set_range_end(end);
    request.set_keys_only(true);
    request.set_limit(kPageSize);
    request.set_revision(revision);  // 0 on the first page: the newest.
    etcdserverpb::RangeResponse response;
    absl::Status status = Cancellable(
        absl::Now() + spec_.rpc_timeout, "Range",
        [&](grpc::ClientContext* context) {
          return RangeAndWait(connection_->kv(), context, request, &response);
        });
    if (!status.ok()) return status;
    if (revision == 0) revision = response.header().revision();
    std::string name;
    for (const mvccpb::KeyValue& kv : response.kvs()) {
      if (NameOf(kv.key(), &name)) names[name][kv.key()] = kv.create_revision();
    }
    if (!response.more() || response.kvs_size() == 0) break;
    start = absl::StrCat(response.kvs(response.kvs_size() - 1).key(),
                         absl::string_view("\0", 1));
  }
  absl::flat_hash_set<std::string> changed;
  for (const auto& [name, keys] : names_) changed.insert(name);
  for (const auto& [name, keys] : names) changed.insert(name);
  names_ = std::move(names);
  revision_ = revision;
  Report(changed);
  return absl::OkStatus();
}

absl::Status EtcdWatcher::Watch(bool* resync, bool* progressed) {
  absl::Status ended;
  absl::Status status = Cancellable(
      absl::InfiniteFuture(), "Watch", [&](grpc::ClientContext* context) {
        etcdserverpb::WatchRequest request;
        etcdserverpb::WatchCreateRequest* create =
            request.mutable_create_request();
        create->set_key(dir_);
        create->set_range_end(PrefixEnd(dir_));
        create->set_start_revision(revision_ + 1);
        FENCEGATE_SYNC_POINT("EtcdWatcher::Watch:Start");
        WatchStream stream(connection_->watch(), context, std::move(request));
        etcdserverpb::WatchResponse response;
        while (stream.Read(&response)) {
          if (response.compact_revision() > 0) {
            *resync = true;
            ended = absl::OutOfRangeError(absl::StrCat(
                "etcd compacted the history of ", dir_, " up to revision ",
                response.compact_revision(), "; reading it again"));
            break;
          }
          if (response.canceled()) {
            ended = absl::AbortedError(
                absl::StrCat("etcd cancelled the watch of ", dir_, ": ",
                             response.cancel_reason()));
            break;
          }
          *progressed = true;
          connected_ = true;
          absl::flat_hash_set<std::string> changed;
          std::string name;
          for (const mvccpb::Event& event : response.events()) {
            const mvccpb::KeyValue& kv = event.kv();
            revision_ = std::max(revision_, kv.mod_revision());
            if (!NameOf(kv.key(), &name)) continue;
            changed.insert(name);
            if (event.type() == mvccpb::Event::DELETE) {
              auto it = names_.find(name);
              if (it == names_.end()) continue;
              it->second.erase(kv.key());
              if (it->second.empty()) names_.erase(it);
            } else {
              names_[name][kv.key()] = kv.create_revision();
            }
          }
          Report(changed);
        }
        context->TryCancel();
        return stream.Finish();
      });
  if (!ended.ok()) return ended;
  if (!status.ok()) return status;
  return absl::UnavailableError(
      absl::StrCat("etcd at ", connection_->endpoint(), " ended the watch"));
}

absl::StatusOr<LockHolder> EtcdWatcher::HolderOf(const std::string& name) {
  std::shared_ptr<EtcdConnection> connection = Connection();
  if (connection == nullptr) {
    return absl::FailedPreconditionError("the etcd watcher is not started");
  }
  // The keys under "<prefix>/<name>/", oldest first. The lock's own keys
  // are "<prefix>/<name>/<id>"; keys of nested lock names
  // ("<prefix>/<name>/sub/<id>") share the range but are other locks, so
  // the holder is the oldest key whose name is exactly `name`.
  const std::string keys = absl::StrCat(dir_, name, "/");
  etcdserverpb::RangeRequest request;
  request.set_key(keys);
  request.set_range_end(PrefixEnd(keys));
  request.set_keys_only(true);
  request.set_sort_order(etcdserverpb::RangeRequest::ASCEND);
  request.set_sort_target(etcdserverpb::RangeRequest::CREATE);
  absl::StatusOr<etcdserverpb::RangeResponse> response =
      connection->Range(request);
  if (!response.ok()) return response.status();
  LockHolder holder;
  holder.newest = static_cast<uint64_t>(response->header().revision());
  std::string key_name;
  for (const mvccpb::KeyValue& kv : response->kvs()) {
    if (NameOf(kv.key(), &key_name) && key_name == name) {
      holder.token = static_cast<uint64_t>(kv.create_revision());
      break;
    }
  }
  return holder;
}

void EtcdWatcher::Report(const absl::flat_hash_set<std::string>& changed) {
  for (const std::string& name : changed) {
    auto it = names_.find(name);
    if (it == names_.end()) {
      reported_.erase(name);
      continue;
    }
    if (absl::Status valid = ValidateDomain(name, "lock name"); !valid.ok()) {
      // A key no EtcdTokenSource would write (e.g. by hand): the gateway
      // could not fence it anyway.
      OnError(valid);
      continue;
    }
    int64_t owner = 0;
    for (const auto& [key, revision] : it->second) {
      if (owner == 0 || revision < owner) owner = revision;
    }
    auto [last, inserted] = reported_.try_emplace(name, owner);
    if (!inserted) {
      if (last->second == owner) continue;
      last->second = owner;
    }
    context_.on_holder(name, static_cast<uint64_t>(owner));
  }
}

bool EtcdWatcher::NameOf(absl::string_view key, std::string* name) const {
  if (!absl::ConsumePrefix(&key, dir_)) return false;
  size_t slash = key.rfind('/');
  if (slash == absl::string_view::npos || slash == 0 ||
      slash + 1 == key.size()) {
    return false;
  }
  name->assign(key.data(), slash);
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TokenWatcher>> CreateEtcdWatcher(
    const TokenWatcherSpec& spec, TokenWatcherContext context) {
  TokenWatcherSpec checked = spec;
  if (checked.lock_path.empty()) checked.lock_path = "fencegate/locks";
  absl::string_view prefix = checked.lock_path;
  absl::ConsumeSuffix(&prefix, "/");
  if (prefix.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "etcd watcher: lock prefix \"", checked.lock_path, "\" is empty"));
  }
  // Checks the endpoint and reads the TLS files now, not at Start().
  absl::StatusOr<std::shared_ptr<EtcdConnection>> connection =
      EtcdConnection::Create(checked.endpoint, checked.rpc_timeout,
                             checked.tls);
  if (!connection.ok()) {
    return absl::Status(
        connection.status().code(),
        absl::StrCat("etcd watcher: ", connection.status().message()));
  }
  return std::make_unique<EtcdWatcher>(std::move(checked), std::move(context));
}

}  // namespace fencegate
