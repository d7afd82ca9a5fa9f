// Copyright fencegate authors.

#include "fencegate/client/etcd/etcd_token_source.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "client/etcd/etcd_connection.h"
#include "client/etcd/lease_keeper.h"
#include "etcdserverpb/rpc.grpc.pb.h"
#include "fencegate/common/limits.h"

namespace fencegate::client {
namespace {

using etcd_internal::EtcdConnection;
using etcd_internal::LeaseKeeper;
using etcd_internal::PrefixEnd;

std::string DefaultOwner() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  return absl::StrCat(host, ":", ::getpid());
}

// Txn: delete `key` if its create_revision is still `revision`.
etcdserverpb::TxnRequest CompareAndDelete(const std::string& key,
                                          int64_t revision) {
  etcdserverpb::TxnRequest txn;
  etcdserverpb::Compare* compare = txn.add_compare();
  compare->set_key(key);
  compare->set_target(etcdserverpb::Compare::CREATE);
  compare->set_result(etcdserverpb::Compare::EQUAL);
  compare->set_create_revision(revision);
  txn.add_success()->mutable_request_delete_range()->set_key(key);
  return txn;
}

// Deletes our key if it is still ours, then revokes the lease (which would
// delete the key too, but only once we know it is ours). FAILED_PRECONDITION
// if the key is gone or not ours any more.
absl::Status DeleteAndRevoke(EtcdConnection& connection,
                             const std::string& name, const std::string& key,
                             int64_t revision, int64_t lease_id) {
  absl::StatusOr<etcdserverpb::TxnResponse> txn =
      connection.Txn(CompareAndDelete(key, revision));
  absl::Status revoked = connection.LeaseRevoke(lease_id);
  if (!txn.ok()) return txn.status();
  if (!txn->succeeded()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "lock \"", name, "\" is no longer held by this holder: key ", key,
        " with create_revision ", revision,
        " is gone or was re-created (lease expired or lock taken over)"));
  }
  // NOT_FOUND: the lease ended by itself after our delete; nothing is left.
  if (!revoked.ok() && !absl::IsNotFound(revoked)) return revoked;
  return absl::OkStatus();
}

// A watch stream on the keys of one lock name, for Acquire's wait.
struct WaitWatch {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<etcdserverpb::WatchRequest,
                                           etcdserverpb::WatchResponse>>
      stream;
};

class EtcdHeldLock final : public HeldLock {
 public:
  EtcdHeldLock(std::shared_ptr<EtcdConnection> connection, std::string name,
               std::string key, int64_t revision, int64_t lease_id,
               std::unique_ptr<LeaseKeeper> keeper)
      : connection_(std::move(connection)),
        name_(std::move(name)),
        key_(std::move(key)),
        revision_(revision),
        lease_id_(lease_id),
        keeper_(std::move(keeper)) {}

  ~EtcdHeldLock() override {
    if (!released_) {
      Release().IgnoreError();  // Best effort: the lease expires otherwise.
    }
  }

  const std::string& name() const override { return name_; }
  uint64_t token() const override { return static_cast<uint64_t>(revision_); }
  bool lost() const override {
    return released_.load(std::memory_order_acquire) || keeper_->lost();
  }

  absl::Status Release() override {
    if (released_.exchange(true)) {
      return absl::FailedPreconditionError(
          absl::StrCat("lock \"", name_, "\" was already released"));
    }
    keeper_->Stop();
    return DeleteAndRevoke(*connection_, name_, key_, revision_, lease_id_);
  }

 private:
  const std::shared_ptr<EtcdConnection> connection_;
  const std::string name_;
  const std::string key_;
  const int64_t revision_;
  const int64_t lease_id_;
  const std::unique_ptr<LeaseKeeper> keeper_;
  std::atomic<bool> released_{false};
};

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdTokenSource>> EtcdTokenSource::Create(
    const EtcdTokenSourceOptions& options) {
  absl::string_view prefix = options.prefix;
  absl::ConsumeSuffix(&prefix, "/");
  if (prefix.empty()) {
    return absl::InvalidArgumentError("etcd lock prefix must not be empty");
  }
  absl::StatusOr<std::shared_ptr<EtcdConnection>> connection =
      EtcdConnection::Create(options.endpoint, options.rpc_timeout,
                             options.tls);
  if (!connection.ok()) return connection.status();
  return std::unique_ptr<EtcdTokenSource>(
      new EtcdTokenSource(std::string(prefix), *std::move(connection)));
}

EtcdTokenSource::EtcdTokenSource(std::string prefix,
                                 std::shared_ptr<EtcdConnection> connection)
    : prefix_(std::move(prefix)), connection_(std::move(connection)) {}

EtcdTokenSource::~EtcdTokenSource() = default;

namespace {

// The key of the oldest holder of the lock whose keys are under `dir`,
// among keys created at or before `revision`, and whether `own_key` is
// still there. Keys of nested names ("<dir>x/y") are skipped.
struct Line {
  std::string oldest_key;
  int64_t oldest_revision = 0;
  bool own_key_present = false;
  int64_t header_revision = 0;
};

absl::StatusOr<Line> ReadLine(EtcdConnection& connection,
                              const std::string& dir,
                              const std::string& own_key, int64_t revision) {
  etcdserverpb::RangeRequest range;
  range.set_key(dir);
  range.set_range_end(PrefixEnd(dir));
  range.set_max_create_revision(revision);
  range.set_sort_target(etcdserverpb::RangeRequest::CREATE);
  range.set_sort_order(etcdserverpb::RangeRequest::ASCEND);
  range.set_keys_only(true);
  absl::StatusOr<etcdserverpb::RangeResponse> response =
      connection.Range(range);
  if (!response.ok()) return response.status();
  Line line;
  line.header_revision = response->header().revision();
  for (const mvccpb::KeyValue& kv : response->kvs()) {
    absl::string_view rest = kv.key();
    rest.remove_prefix(dir.size());
    if (rest.empty() || rest.find('/') != absl::string_view::npos) continue;
    if (line.oldest_key.empty()) {
      line.oldest_key = kv.key();
      line.oldest_revision = kv.create_revision();
    }
    if (kv.key() == own_key) line.own_key_present = true;
  }
  return line;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HeldLock>> EtcdTokenSource::Acquire(
    const std::string& name, const LockOptions& options,
    std::function<void()> on_lost) {
  if (absl::Status valid = ValidateDomain(name, "lock name"); !valid.ok()) {
    return valid;
  }
  if (options.ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "lock ttl must be positive, not ", absl::FormatDuration(options.ttl)));
  }
  if (options.wait < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("lock wait must not be negative, not ",
                     absl::FormatDuration(options.wait)));
  }
  const absl::Time deadline = absl::Now() + options.wait;
  const int64_t ttl_seconds =
      absl::ToInt64Seconds(absl::Ceil(options.ttl, absl::Seconds(1)));

  const absl::Time granted_at = absl::Now();
  absl::StatusOr<etcdserverpb::LeaseGrantResponse> lease =
      connection_->LeaseGrant(ttl_seconds);
  if (!lease.ok()) return lease.status();
  const int64_t lease_id = lease->id();
  auto keeper = std::make_unique<LeaseKeeper>(
      connection_, lease_id, absl::Seconds(lease->ttl()), granted_at);

  const std::string dir = absl::StrCat(prefix_, "/", name, "/");
  const std::string key =
      absl::StrCat(dir, absl::Hex(static_cast<uint64_t>(lease_id)));
  etcdserverpb::TxnRequest txn;
  etcdserverpb::Compare* absent = txn.add_compare();
  absent->set_key(key);
  absent->set_target(etcdserverpb::Compare::CREATE);
  absent->set_result(etcdserverpb::Compare::EQUAL);
  absent->set_create_revision(0);
  etcdserverpb::PutRequest* put = txn.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(options.owner.empty() ? DefaultOwner() : options.owner);
  put->set_lease(lease_id);
  txn.add_success()->mutable_request_range()->set_key(key);
  absl::StatusOr<etcdserverpb::TxnResponse> created = connection_->Txn(txn);

  auto give_up = [&](absl::Status status, int64_t revision) {
    keeper->Stop();
    if (revision > 0) {
      DeleteAndRevoke(*connection_, name, key, revision, lease_id)
          .IgnoreError();  // The lease expires by itself if this fails.
    } else {
      connection_->LeaseRevoke(lease_id).IgnoreError();  // Likewise.
    }
    return status;
  };
  if (!created.ok()) return give_up(created.status(), 0);
  if (!created->succeeded()) {
    // A fresh lease's key cannot exist unless someone else wrote it.
    return give_up(absl::InternalError(absl::StrCat(
                       "lock key ", key, " already exists before creation")),
                   0);
  }
  const etcdserverpb::RangeResponse& own =
      created->responses(1).response_range();
  if (own.kvs_size() != 1) {
    return give_up(absl::InternalError(absl::StrCat(
                       "lock key ", key, " missing right after creation")),
                   0);
  }
  const int64_t revision = own.kvs(0).create_revision();

  // Wait until ours is the oldest key of this name.
  std::unique_ptr<WaitWatch> watch;
  while (true) {
    absl::StatusOr<Line> line = ReadLine(*connection_, dir, key, revision);
    if (!line.ok()) return give_up(line.status(), revision);
    if (!line->own_key_present) {
      return give_up(absl::UnavailableError(absl::StrCat(
                         "lock \"", name, "\": this waiter's key ", key,
                         " vanished while waiting (its lease ended)")),
                     revision);
    }
    if (line->oldest_key == key) break;
    if (absl::Now() >= deadline) {
      return give_up(absl::DeadlineExceededError(absl::StrCat(
                         "lock \"", name, "\" is held by ", line->oldest_key,
                         " (token ", line->oldest_revision, ") after waiting ",
                         absl::FormatDuration(options.wait))),
                     revision);
    }
    if (watch == nullptr) {
      // Deletions of this name's keys after the range we just read.
      watch = std::make_unique<WaitWatch>();
      EtcdConnection::Prepare(&watch->context, deadline);
      watch->stream = connection_->watch().Watch(&watch->context);
      etcdserverpb::WatchRequest request;
      etcdserverpb::WatchCreateRequest* create =
          request.mutable_create_request();
      create->set_key(dir);
      create->set_range_end(PrefixEnd(dir));
      create->set_start_revision(line->header_revision + 1);
      create->add_filters(etcdserverpb::WatchCreateRequest::NOPUT);
      if (!watch->stream->Write(request)) {
        grpc::Status status = watch->stream->Finish();
        watch.reset();
        if (absl::Now() >= deadline) continue;  // Reports the holder above.
        return give_up(connection_->ToStatus(status, "Watch"), revision);
      }
    }
    etcdserverpb::WatchResponse response;
    bool got_events = false;
    while (!got_events && watch->stream->Read(&response)) {
      if (response.canceled()) break;  // E.g. compacted: watch anew.
      got_events = response.events_size() > 0;
    }
    if (!got_events) {
      watch->context.TryCancel();
      grpc::Status status = watch->stream->Finish();
      if (!response.canceled() && absl::Now() < deadline &&
          status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
        return give_up(connection_->ToStatus(status, "Watch"), revision);
      }
      watch.reset();  // Range again: held (deadline) or watch anew.
    }
  }

  if (!keeper->Arm(std::move(on_lost))) {
    return give_up(absl::UnavailableError(absl::StrCat(
                       "lock \"", name, "\": the lease ended while acquiring")),
                   revision);
  }
  return std::make_unique<EtcdHeldLock>(connection_, name, key, revision,
                                        lease_id, std::move(keeper));
}

}  // namespace fencegate::client
