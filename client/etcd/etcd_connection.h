// Copyright fencegate authors.
//
// EtcdConnection (internal to client/etcd): one gRPC channel to one etcd
// endpoint with the KV, Lease and Watch stubs of proto/etcd/, and the few
// unary calls the token source and the fence watcher share. Every call has
// a deadline and waits for the channel to (re)connect up to it, so a
// restarted etcd is picked up by the next call.
//
// Thread safety: safe for concurrent use (gRPC stubs are).

#ifndef CLIENT_ETCD_ETCD_CONNECTION_H_
#define CLIENT_ETCD_ETCD_CONNECTION_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "etcdserverpb/rpc.grpc.pb.h"
#include "fencegate/client/tls.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"

namespace fencegate::client::etcd_internal {

class EtcdConnection {
 public:
  // `endpoint` is "host:port", optionally with "http://". INVALID_ARGUMENT
  // for an empty endpoint, for "https://" without `tls`, for TLS files that
  // cannot be read, or for a
  // non-positive `rpc_timeout`. Does not connect: etcd may still be down.
  static absl::StatusOr<std::shared_ptr<EtcdConnection>> Create(
      absl::string_view endpoint, absl::Duration rpc_timeout,
      const TlsFiles& tls = {});

  EtcdConnection(const EtcdConnection&) = delete;
  EtcdConnection& operator=(const EtcdConnection&) = delete;

  const std::string& endpoint() const { return endpoint_; }
  absl::Duration rpc_timeout() const { return rpc_timeout_; }

  etcdserverpb::KV::Stub& kv() { return *kv_; }
  etcdserverpb::Lease::Stub& lease() { return *lease_; }
  etcdserverpb::Watch::Stub& watch() { return *watch_; }

  // Sets `deadline` on `context` and makes the call wait for the channel to
  // become ready (instead of failing at once while etcd restarts).
  static void Prepare(grpc::ClientContext* context, absl::Time deadline);

  // Unary calls with a deadline of now + rpc_timeout. Errors: UNAVAILABLE if
  // etcd cannot be reached in time; etcd's own code otherwise.
  absl::StatusOr<etcdserverpb::RangeResponse> Range(
      const etcdserverpb::RangeRequest& request);
  absl::StatusOr<etcdserverpb::TxnResponse> Txn(
      const etcdserverpb::TxnRequest& request);
  absl::StatusOr<etcdserverpb::LeaseGrantResponse> LeaseGrant(
      int64_t ttl_seconds);
  // NOT_FOUND if the lease does not exist (expired or revoked before).
  absl::Status LeaseRevoke(int64_t lease_id);

  // Converts the status of an etcd call named `what`: UNAVAILABLE and
  // DEADLINE_EXCEEDED (etcd down, unreachable or too slow) both become
  // UNAVAILABLE; other codes are kept. The message names the endpoint.
  absl::Status ToStatus(const grpc::Status& status,
                        absl::string_view what) const;

 private:
  EtcdConnection(std::string endpoint, absl::Duration rpc_timeout,
                 std::shared_ptr<grpc::Channel> channel);

  const std::string endpoint_;
  const absl::Duration rpc_timeout_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<etcdserverpb::KV::Stub> kv_;
  const std::unique_ptr<etcdserverpb::Lease::Stub> lease_;
  const std::unique_ptr<etcdserverpb::Watch::Stub> watch_;
};

// The end of the key range holding every key that starts with `prefix`
// (etcd's "prefix + 1"): the last byte below 0xff incremented, the rest
// dropped; "\0" (all keys) if there is none.
std::string PrefixEnd(absl::string_view prefix);

}  // namespace fencegate::client::etcd_internal

#endif  // CLIENT_ETCD_ETCD_CONNECTION_H_
