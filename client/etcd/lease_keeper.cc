// Copyright fencegate authors.

#include "client/etcd/lease_keeper.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "fencegate/common/fatal.h"

namespace fencegate::client::etcd_internal {
namespace {

// Pause between failed keep-alive rounds (each one already waited for up to
// rpc_timeout for etcd to answer).
constexpr absl::Duration kRetryPause = absl::Milliseconds(200);

}  // namespace

LeaseKeeper::LeaseKeeper(std::shared_ptr<EtcdConnection> connection,
                         int64_t lease_id, absl::Duration ttl,
                         absl::Time granted_at)
    : connection_(std::move(connection)),
      lease_id_(lease_id),
      ttl_(ttl),
      expiry_(granted_at + ttl) {
  thread_ = std::thread([this] { Run(); });
}

LeaseKeeper::~LeaseKeeper() { Stop(); }

bool LeaseKeeper::Arm(std::function<void()> on_lost) {
  absl::MutexLock lock(&mu_);
  if (lost_.load(std::memory_order_acquire)) return false;
  on_lost_ = std::move(on_lost);
  armed_ = true;
  return true;
}

void LeaseKeeper::Stop() {
  if (thread_.get_id() == std::this_thread::get_id()) {
    // Joining ourselves would hang forever: a broken contract, not an error
    // to recover from.
    Fatal("lease keeper", "HeldLock released or destroyed inside on_lost");
  }
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    if (active_ != nullptr) active_->TryCancel();
  }
  if (thread_.joinable()) thread_.join();
}

bool LeaseKeeper::WaitStopped(absl::Time until) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithDeadline(absl::Condition(&stop_), until);
  return stop_;
}

void LeaseKeeper::Run() {
  absl::Time next = absl::Now() + ttl_ / 3;
  while (!WaitStopped(next)) {
    absl::Time sent = absl::Now();
    if (sent >= expiry_) {
      MarkLost();
      return;
    }
    absl::StatusOr<int64_t> ttl_seconds =
        KeepAliveOnce(std::min(sent + connection_->rpc_timeout(), expiry_));
    if (ttl_seconds.ok()) {
      if (*ttl_seconds <= 0) {  // etcd: the lease expired or was revoked.
        MarkLost();
        return;
      }
      ttl_ = absl::Seconds(*ttl_seconds);
      expiry_ = sent + ttl_;
      next = sent + ttl_ / 3;
    } else {
      // Retried until expiry_; the check at the top of the loop ends it.
      next = std::min(absl::Now() + kRetryPause, expiry_);
    }
  }
}

absl::StatusOr<int64_t> LeaseKeeper::KeepAliveOnce(absl::Time deadline) {
  grpc::ClientContext context;
  EtcdConnection::Prepare(&context, deadline);
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return absl::CancelledError("stopped");
    active_ = &context;
  }
  auto stream = connection_->lease().LeaseKeepAlive(&context);
  etcdserverpb::LeaseKeepAliveRequest request;
  request.set_id(lease_id_);
  etcdserverpb::LeaseKeepAliveResponse response;
  bool answered = stream->Write(request) && stream->Read(&response);
  stream->WritesDone();
  grpc::Status status = stream->Finish();
  {
    absl::MutexLock lock(&mu_);
    active_ = nullptr;
  }
  if (answered) return response.ttl();
  if (status.ok()) {
    return absl::UnavailableError("etcd closed the keep-alive stream");
  }
  return connection_->ToStatus(status, "LeaseKeepAlive");
}

void LeaseKeeper::MarkLost() {
  std::function<void()> on_lost;
  {
    absl::MutexLock lock(&mu_);
    lost_.store(true, std::memory_order_release);
    if (armed_ && !stop_) on_lost = std::move(on_lost_);
  }
  if (on_lost) on_lost();
}

}  // namespace fencegate::client::etcd_internal
