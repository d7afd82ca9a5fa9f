// Copyright fencegate authors.

#include "gateway/lease_service.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "fencegate/common/grpc_status.h"
#include "observability/log.h"

namespace fencegate {

namespace {

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context,
                                    const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace

LeaseService::LeaseService(LeaseManager* manager, IoPool* pool,
                           const RequestGate* gate)
    : manager_(manager), pool_(pool), gate_(gate) {}

grpc::ServerUnaryReactor* LeaseService::Acquire(
    grpc::CallbackServerContext* context, const v1::AcquireRequest* request,
    v1::AcquireResponse* response) {
  absl::StatusOr<std::unique_ptr<Admission>> admitted =
      gate_->Admit(*context, CallFactsOf(*request));
  if (!admitted.ok()) return FinishNow(context, admitted.status());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
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
      [reactor, response, admission](absl::StatusOr<AcquireOutcome> outcome) {
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
        reactor->Finish(ToGrpcStatus(outcome.status()));
      });
  return reactor;
}

grpc::ServerUnaryReactor* LeaseService::KeepAlive(
    grpc::CallbackServerContext* context, const v1::KeepAliveRequest* request,
    v1::KeepAliveResponse* response) {
  if (absl::StatusOr<std::unique_ptr<Admission>> admitted =
          gate_->Admit(*context, CallFactsOf(*request));
      !admitted.ok()) {
    return FinishNow(context, admitted.status());
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  pool_->Post([this, reactor, request, response]() {
    absl::StatusOr<absl::Duration> ttl =
        manager_->KeepAlive(request->name(), request->lease_id());
    if (ttl.ok()) {
      response->set_ttl_ms(
          static_cast<uint32_t>(absl::ToInt64Milliseconds(*ttl)));
    }
    reactor->Finish(ToGrpcStatus(ttl.status()));
  });
  return reactor;
}

grpc::ServerUnaryReactor* LeaseService::Release(
    grpc::CallbackServerContext* context, const v1::ReleaseRequest* request,
    v1::ReleaseResponse* response) {
  if (absl::StatusOr<std::unique_ptr<Admission>> admitted =
          gate_->Admit(*context, CallFactsOf(*request));
      !admitted.ok()) {
    return FinishNow(context, admitted.status());
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  pool_->Post([this, reactor, request]() {
    absl::Status s = manager_->Release(request->name(), request->lease_id());
    if (s.ok()) {
      Log(LogSeverity::kInfo,
          absl::StrFormat("lease released name=\"%s\"",
                          absl::CHexEscape(request->name())));
    }
    reactor->Finish(ToGrpcStatus(s));
  });
  return reactor;
}

}  // namespace fencegate
