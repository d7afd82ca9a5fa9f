// Copyright fencegate authors.

#include "gateway/lease_service.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "fencegate/common/grpc_status.h"
#include "observability/log.h"

namespace fencegate {

namespace {

template <typename Call>
void FinishNow(Call* call, const absl::Status& status) {
  call->Finish(ToGrpcStatus(status));
}

}  // namespace

LeaseService::LeaseService(LeaseManager* manager, IoPool* pool,
                           const RequestGate* gate)
    : manager_(manager),
      pool_(pool),
      gate_(gate),
      acquire_(AcquireCall::Of(&grpc_service_,
                               &v1::Lease::AsyncService::RequestAcquire,
                               [this](AcquireCall* call) { Acquire(call); })),
      keep_alive_(KeepAliveCall::Of(
          &grpc_service_, &v1::Lease::AsyncService::RequestKeepAlive,
          [this](KeepAliveCall* call) { KeepAlive(call); })),
      release_(ReleaseCall::Of(&grpc_service_,
                               &v1::Lease::AsyncService::RequestRelease,
                               [this](ReleaseCall* call) { Release(call); })) {}

void LeaseService::Listen(Queue queue) const {
  AcquireCall::Listen(&acquire_, queue);
  KeepAliveCall::Listen(&keep_alive_, queue);
  ReleaseCall::Listen(&release_, queue);
}

void LeaseService::Acquire(AcquireCall* call) {
  grpc::ServerContext* context = call->context();
  const v1::AcquireRequest* request = &call->request();
  absl::StatusOr<std::unique_ptr<Admission>> admitted =
      gate_->Admit(*context, CallFactsOf(*request));
  if (!admitted.ok()) return FinishNow(call, admitted.status());
  // Acquire never blocks: a grant waits for its domain's turn (behind the
  // domain's writes) holding no thread, and finishes on the I/O pool.
  std::shared_ptr<Admission> admission(*std::move(admitted));
  // Never wait past the caller's deadline.
  const absl::Duration until_deadline =
      absl::FromChrono(context->deadline()) - absl::Now();
  const absl::Duration wait = std::max(
      absl::ZeroDuration(),
      std::min(absl::Milliseconds(request->wait_ms()), until_deadline));
  manager_->Acquire(
      request->name(), request->owner(), admission->identity(),
      absl::Milliseconds(request->ttl_ms()), wait,
      [context] { return context->IsCancelled(); },
      [call, admission](absl::StatusOr<AcquireOutcome> outcome) {
        v1::AcquireResponse* response = call->response();
        if (outcome.ok()) {
          const LeaseRecord& lease = outcome->lease;
          response->set_acquired(outcome->acquired);
          if (outcome->acquired) {
            response->set_token(lease.token);
            response->set_lease_id(lease.lease_id);
            response->set_ttl_ms(
                static_cast<uint32_t>(absl::ToInt64Milliseconds(lease.ttl)));
            Log(LogSeverity::kInfo,
                absl::StrFormat("lease granted name=\"%s\" owner=\"%s\" "
                                "token=%d (fence raised)",
                                absl::CHexEscape(lease.name),
                                absl::CHexEscape(lease.owner), lease.token));
            admission->AuditAdvance(lease.token);
          } else {
            response->set_holder_owner(lease.owner);
            response->set_holder_token(lease.token);
          }
        }
        call->Finish(ToGrpcStatus(outcome.status()));
      });
}

void LeaseService::KeepAlive(KeepAliveCall* call) {
  const v1::KeepAliveRequest* request = &call->request();
  if (absl::StatusOr<std::unique_ptr<Admission>> admitted =
          gate_->Admit(*call->context(), CallFactsOf(*request));
      !admitted.ok()) {
    return FinishNow(call, admitted.status());
  }
  pool_->Post([this, call, request]() {
    absl::StatusOr<absl::Duration> ttl =
        manager_->KeepAlive(request->name(), request->lease_id());
    if (ttl.ok()) {
      call->response()->set_ttl_ms(
          static_cast<uint32_t>(absl::ToInt64Milliseconds(*ttl)));
    }
    call->Finish(ToGrpcStatus(ttl.status()));
  });
}

void LeaseService::Release(ReleaseCall* call) {
  const v1::ReleaseRequest* request = &call->request();
  if (absl::StatusOr<std::unique_ptr<Admission>> admitted =
          gate_->Admit(*call->context(), CallFactsOf(*request));
      !admitted.ok()) {
    return FinishNow(call, admitted.status());
  }
  pool_->Post([this, call, request]() {
    absl::Status s = manager_->Release(request->name(), request->lease_id());
    if (s.ok()) {
      Log(LogSeverity::kInfo,
          absl::StrFormat("lease released name=\"%s\"",
                          absl::CHexEscape(request->name())));
    }
    call->Finish(ToGrpcStatus(s));
  });
}

}  // namespace fencegate
