// Copyright fencegate authors.

#include "fencegate/client/lease_token_source.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/kept_lock.h"
#include "fencegate/v1/lease.grpc.pb.h"

namespace fencegate::client {
namespace {

absl::Status FromGrpc(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      s.error_message());
}

void SetDeadline(grpc::ClientContext* context, absl::Duration d) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + d));
}

std::string DefaultOwner() {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  return absl::StrCat(host, ":", ::getpid());
}

class LeaseLock final : public internal::KeptLock {
 public:
  LeaseLock(std::unique_ptr<v1::Lease::Stub> stub, std::string name,
            uint64_t token, std::string lease_id, absl::Duration ttl,
            absl::Time granted, std::function<void()> on_lost)
      : KeptLock(std::move(name), token, ttl, granted, std::move(on_lost)),
        stub_(std::move(stub)),
        lease_id_(std::move(lease_id)),
        ttl_(ttl) {
    StartKeepAlive();
  }
  ~LeaseLock() override { Shutdown(); }

 private:
  Renewal Renew() override {
    v1::KeepAliveRequest request;
    request.set_name(name());
    request.set_lease_id(lease_id_);
    v1::KeepAliveResponse response;
    grpc::ClientContext context;
    SetDeadline(&context, ttl_ / 3);
    grpc::Status s = stub_->KeepAlive(&context, request, &response);
    if (s.ok()) return Renewal::kRenewed;
    // NOT_FOUND: the service says the lease is gone.
    return s.error_code() == grpc::StatusCode::NOT_FOUND ? Renewal::kGone
                                                         : Renewal::kFailed;
  }

  absl::Status Remove() override {
    v1::ReleaseRequest request;
    request.set_name(name());
    request.set_lease_id(lease_id_);
    v1::ReleaseResponse response;
    grpc::ClientContext context;
    SetDeadline(&context, absl::Seconds(10));
    return FromGrpc(stub_->Release(&context, request, &response));
  }

  std::unique_ptr<v1::Lease::Stub> stub_;
  const std::string lease_id_;
  const absl::Duration ttl_;
};

}  // namespace

LeaseTokenSource::LeaseTokenSource(std::shared_ptr<grpc::Channel> channel)
    : channel_(std::move(channel)) {}

LeaseTokenSource::~LeaseTokenSource() = default;

absl::StatusOr<std::unique_ptr<HeldLock>> LeaseTokenSource::Acquire(
    const std::string& name, const LockOptions& options,
    std::function<void()> on_lost) {
  auto stub = v1::Lease::NewStub(channel_);
  v1::AcquireRequest request;
  request.set_name(name);
  request.set_ttl_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(options.ttl)));
  request.set_wait_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(options.wait)));
  request.set_owner(options.owner.empty() ? DefaultOwner() : options.owner);
  v1::AcquireResponse response;
  grpc::ClientContext context;
  SetDeadline(&context, options.wait + absl::Seconds(10));
  grpc::Status s = stub->Acquire(&context, request, &response);
  if (!s.ok()) return FromGrpc(s);
  if (!response.acquired()) {
    return absl::DeadlineExceededError(absl::StrCat(
        "lock \"", name, "\" is held by \"", response.holder_owner(),
        "\" (token ", response.holder_token(), ")"));
  }
  return std::unique_ptr<HeldLock>(new LeaseLock(
      std::move(stub), name, response.token(), response.lease_id(),
      absl::Milliseconds(response.ttl_ms()), absl::Now(), std::move(on_lost)));
}

}  // namespace fencegate::client
