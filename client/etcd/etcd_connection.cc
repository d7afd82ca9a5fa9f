// Copyright fencegate authors.

#include "client/etcd/etcd_connection.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace fencegate::client::etcd_internal {

absl::StatusOr<std::shared_ptr<EtcdConnection>> EtcdConnection::Create(
    absl::string_view endpoint, absl::Duration rpc_timeout,
    const TlsFiles& tls) {
  if (absl::StartsWith(endpoint, "https://") && !tls.enabled()) {
    return absl::InvalidArgumentError(
        absl::StrCat("etcd endpoint \"", endpoint,
                     "\": https needs the CA bundle of etcd's certificate"));
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      ChannelCredentials(tls);
  if (!credentials.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("etcd: ", credentials.status().message()));
  }
  absl::string_view target = endpoint;
  if (!absl::ConsumePrefix(&target, "http://")) {
    absl::ConsumePrefix(&target, "https://");
  }
  absl::ConsumeSuffix(&target, "/");
  if (target.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("etcd endpoint \"", endpoint, "\" is empty"));
  }
  if (rpc_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("etcd rpc_timeout must be positive, not ",
                     absl::FormatDuration(rpc_timeout)));
  }
  grpc::ChannelArguments args;
  // Reconnect quickly after etcd restarts (gRPC's default backoff grows to
  // two minutes). The connect timeout stays gRPC's 20 s.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Notice a silently dead etcd under a long idle watch. etcd refuses pings
  // more often than every 5 s (--grpc-keepalive-min-time) and pings without
  // an open stream.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(std::string(target), *credentials, args);
  return std::shared_ptr<EtcdConnection>(
      new EtcdConnection(std::string(target), rpc_timeout, std::move(channel)));
}

EtcdConnection::EtcdConnection(std::string endpoint, absl::Duration rpc_timeout,
                               std::shared_ptr<grpc::Channel> channel)
    : endpoint_(std::move(endpoint)),
      rpc_timeout_(rpc_timeout),
      channel_(std::move(channel)),
      kv_(etcdserverpb::KV::NewStub(channel_)),
      lease_(etcdserverpb::Lease::NewStub(channel_)),
      watch_(etcdserverpb::Watch::NewStub(channel_)) {}

void EtcdConnection::Prepare(grpc::ClientContext* context,
                             absl::Time deadline) {
  context->set_deadline(absl::ToChronoTime(deadline));
  context->set_wait_for_ready(true);
}

absl::StatusOr<etcdserverpb::RangeResponse> EtcdConnection::Range(
    const etcdserverpb::RangeRequest& request) {
  grpc::ClientContext context;
  Prepare(&context, absl::Now() + rpc_timeout_);
  etcdserverpb::RangeResponse response;
  grpc::Status status = kv_->Range(&context, request, &response);
  if (!status.ok()) return ToStatus(status, "Range");
  return response;
}

absl::StatusOr<etcdserverpb::TxnResponse> EtcdConnection::Txn(
    const etcdserverpb::TxnRequest& request) {
  grpc::ClientContext context;
  Prepare(&context, absl::Now() + rpc_timeout_);
  etcdserverpb::TxnResponse response;
  grpc::Status status = kv_->Txn(&context, request, &response);
  if (!status.ok()) return ToStatus(status, "Txn");
  return response;
}

absl::StatusOr<etcdserverpb::LeaseGrantResponse> EtcdConnection::LeaseGrant(
    int64_t ttl_seconds) {
  grpc::ClientContext context;
  Prepare(&context, absl::Now() + rpc_timeout_);
  etcdserverpb::LeaseGrantRequest request;
  request.set_ttl(ttl_seconds);
  etcdserverpb::LeaseGrantResponse response;
  grpc::Status status = lease_->LeaseGrant(&context, request, &response);
  if (!status.ok()) return ToStatus(status, "LeaseGrant");
  if (!response.error().empty()) {
    return absl::UnavailableError(absl::StrCat(
        "etcd at ", endpoint_, ": LeaseGrant: ", response.error()));
  }
  return response;
}

absl::Status EtcdConnection::LeaseRevoke(int64_t lease_id) {
  grpc::ClientContext context;
  Prepare(&context, absl::Now() + rpc_timeout_);
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(lease_id);
  etcdserverpb::LeaseRevokeResponse response;
  grpc::Status status = lease_->LeaseRevoke(&context, request, &response);
  if (!status.ok()) return ToStatus(status, "LeaseRevoke");
  return absl::OkStatus();
}

absl::Status EtcdConnection::ToStatus(const grpc::Status& status,
                                      absl::string_view what) const {
  switch (status.error_code()) {
    case grpc::StatusCode::OK:
      return absl::OkStatus();
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return absl::UnavailableError(
          absl::StrCat("etcd at ", endpoint_, " unreachable (", what,
                       "): ", status.error_message()));
    default:
      return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                          absl::StrCat("etcd at ", endpoint_, ": ", what, ": ",
                                       status.error_message()));
  }
}

std::string PrefixEnd(absl::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    unsigned char last = static_cast<unsigned char>(end.back());
    if (last < 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

}  // namespace fencegate::client::etcd_internal
