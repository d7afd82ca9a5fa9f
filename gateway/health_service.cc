// Copyright fencegate authors.

#include "gateway/health_service.h"

#include <optional>
#include <string>

#include "gateway/completion_queues.h"
#include "grpcpp/support/async_stream.h"

namespace fencegate {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// One Watch call on its queue, from its request until gRPC lets go of it.
// Its state is the service's, under the service's lock: the status changes
// come from any thread, the call's events on its queue's thread. One write
// at a time is in flight; a change meanwhile is sent when it completes.
class HealthService::WatchCall final {
 public:
  static void Listen(HealthService* service, Queue queue) {
    new WatchCall(service, queue);
  }

  // Sends `status` now, or once the write in flight completes.
  void Send(Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(service_->mu_) {
    if (finishing_ || (sent_any_ && status == latest_)) return;
    sent_any_ = true;
    latest_ = status;
    if (writing_) {
      pending_ = status;
      dirty_ = true;
      return;
    }
    writing_ = true;
    response_.set_status(status);
    writer_.Write(response_, &wrote_);
  }

  // Tells the lock analysis that the service's lock, which the caller
  // holds, is this call's.
  void AssertLockHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK(service_->mu_) {
    service_->mu_.AssertHeld();
  }

  // The service it watches. Read only once the call has arrived (gRPC
  // filled the request before).
  const std::string& service_name() const { return request_.service(); }

  // Ends the call once its last status is written (Shutdown()).
  void End() ABSL_EXCLUSIVE_LOCKS_REQUIRED(service_->mu_) {
    end_ = true;
    if (!writing_) FinishLocked();
  }

 private:
  using Event = MemberTag<WatchCall>;

  WatchCall(HealthService* service, Queue queue)
      : service_(service), queue_(queue), writer_(&context_) {
    context_.AsyncNotifyWhenDone(&over_);
    service_->grpc_service_.RequestWatch(&context_, &request_, &writer_,
                                         queue_.cq, queue_.cq, &arrived_);
  }

  void Arrived(bool ok) {
    if (!ok) {  // The server is shutting down; the call never began.
      delete this;
      return;
    }
    queue_.live->Add();
    Listen(service_, queue_);
    absl::MutexLock lock(&service_->mu_);
    service_->watches_.insert(this);
    Send(service_->StatusOf(request_.service()));
    if (service_->shut_down_) End();
  }

  void Wrote(bool ok) {
    absl::MutexLock lock(&service_->mu_);
    writing_ = false;
    if (!ok || over_seen_ || (end_ && !dirty_)) {
      FinishLocked();
    } else if (dirty_) {
      dirty_ = false;
      Send(pending_);
    }
  }

  // gRPC's word that the call is over (the client went away, or the finish
  // reached it).
  void Over(bool /*ok*/) {
    {
      absl::MutexLock lock(&service_->mu_);
      over_seen_ = true;
      if (!writing_) FinishLocked();
    }
    Ended();
  }

  void Finished(bool /*ok*/) { Ended(); }

  void FinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(service_->mu_) {
    if (finishing_) return;
    finishing_ = true;
    service_->watches_.erase(this);
    writer_.Finish(grpc::Status::OK, &finished_);
  }

  // The finish and the call's end, both on this queue's thread.
  void Ended() {
    if (--left_ > 0) return;
    LiveCalls* live = queue_.live;
    delete this;
    live->Remove();
  }

  HealthService* const service_;
  const Queue queue_;
  grpc::ServerContext context_;
  HealthCheckRequest request_;
  HealthCheckResponse response_;
  grpc::ServerAsyncWriter<HealthCheckResponse> writer_;
  Event arrived_{this, &WatchCall::Arrived};
  Event wrote_{this, &WatchCall::Wrote};
  Event finished_{this, &WatchCall::Finished};
  Event over_{this, &WatchCall::Over};
  bool writing_ = false;
  // The last status sent or queued.
  bool sent_any_ = false;
  Status latest_ = HealthCheckResponse::UNKNOWN;
  bool dirty_ = false;
  Status pending_ = HealthCheckResponse::UNKNOWN;
  bool end_ = false;
  bool over_seen_ = false;
  bool finishing_ = false;
  int left_ = 2;
};

HealthService::HealthService()
    : check_(CheckCall::Of(
          &grpc_service_, &grpc::health::v1::Health::AsyncService::RequestCheck,
          [this](CheckCall* call) { Check(call); })) {
  statuses_[""] = HealthCheckResponse::SERVING;
}

HealthService::~HealthService() = default;

void HealthService::Listen(Queue queue) {
  CheckCall::Listen(&check_, queue);
  WatchCall::Listen(this, queue);
}

void HealthService::Check(CheckCall* call) {
  std::optional<Status> status;
  {
    absl::MutexLock lock(&mu_);
    auto it = statuses_.find(call->request().service());
    if (it != statuses_.end()) status = it->second;
  }
  if (!status.has_value()) {
    call->Finish(
        grpc::Status(grpc::StatusCode::NOT_FOUND, "service name unknown"));
    return;
  }
  call->response()->set_status(*status);
  call->Finish(grpc::Status::OK);
}

HealthService::Status HealthService::StatusOf(
    const std::string& service) const {
  auto it = statuses_.find(service);
  return it == statuses_.end() ? HealthCheckResponse::SERVICE_UNKNOWN
                               : it->second;
}

void HealthService::Notify() {
  for (WatchCall* watch : watches_) {
    watch->AssertLockHeld();
    watch->Send(StatusOf(watch->service_name()));
  }
}

void HealthService::SetServingStatus(const std::string& service, bool serving) {
  absl::MutexLock lock(&mu_);
  // After Shutdown() every service is NOT_SERVING, a new one too.
  statuses_[service] = serving && !shut_down_
                           ? HealthCheckResponse::SERVING
                           : HealthCheckResponse::NOT_SERVING;
  Notify();
}

void HealthService::SetServingStatus(bool serving) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  for (auto& [name, status] : statuses_) {
    status = serving ? HealthCheckResponse::SERVING
                     : HealthCheckResponse::NOT_SERVING;
  }
  Notify();
}

void HealthService::Shutdown() {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  shut_down_ = true;
  for (auto& [name, status] : statuses_) {
    status = HealthCheckResponse::NOT_SERVING;
  }
  Notify();
  // End() may finish a call at once, which takes it out of watches_.
  const absl::flat_hash_set<WatchCall*> watches = watches_;
  for (WatchCall* watch : watches) {
    watch->AssertLockHeld();
    watch->End();
  }
}

}  // namespace fencegate
