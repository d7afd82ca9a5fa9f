// Copyright fencegate authors.
//
// A throwaway single-member etcd for integration tests: /usr/bin/etcd on
// free loopback client and peer ports, with its data directory in a fresh
// temporary directory. Start() returns once etcd answers a linearizable
// Range (so it has a leader). Plus direct etcd calls for the tests to look
// at or tamper with the lock keys behind the client's back.

#ifndef TESTS_ETCD_SERVER_H_
#define TESTS_ETCD_SERVER_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "etcdserverpb/rpc.grpc.pb.h"

namespace fencegate::testing {

// TLS for the client port (PEM paths): etcd's certificate and key, and the
// CA bundle client certificates must chain to (--client-cert-auth). The
// fixture's own calls present `client_cert`.
struct EtcdTls {
  std::string ca;
  std::string cert;
  std::string key;
  std::string client_cert;
  std::string client_key;
};

class EtcdServer {
 public:
  // Starts etcd and waits until it serves; with `tls`, over https only and
  // requiring client certificates. UNAVAILABLE with etcd's log if it exits
  // or does not answer within 60 s.
  static absl::StatusOr<std::unique_ptr<EtcdServer>> Start(
      const EtcdTls& tls = {});
  ~EtcdServer();  // SIGKILLs etcd if running and removes its directory.

  EtcdServer(const EtcdServer&) = delete;
  EtcdServer& operator=(const EtcdServer&) = delete;

  // "127.0.0.1:PORT", the client endpoint.
  std::string endpoint() const;

  // SIGKILL, then wait for the process to exit. Data stays.
  void Kill();
  // Starts etcd again on the same ports and data directory, and waits until
  // it serves.
  absl::Status Restart();

  // Direct calls, with a 10 s deadline each.
  // The keys under `prefix`, oldest create_revision first.
  absl::StatusOr<std::vector<mvccpb::KeyValue>> RangePrefix(
      const std::string& prefix);
  // Put without a lease; returns the revision of the put.
  absl::StatusOr<int64_t> Put(const std::string& key, const std::string& value);
  absl::Status Delete(const std::string& key);
  // Compacts the history up to `revision`: a watch from an earlier revision
  // is then refused with the compaction's revision.
  absl::Status Compact(int64_t revision);
  absl::Status RevokeLease(int64_t lease_id);

 private:
  EtcdServer() = default;
  absl::Status Launch();
  absl::Status WaitUntilServing();

  std::string dir_;
  EtcdTls tls_;
  int client_port_ = 0;
  int peer_port_ = 0;
  pid_t pid_ = -1;
  std::unique_ptr<etcdserverpb::KV::Stub> kv_;
  std::unique_ptr<etcdserverpb::Lease::Stub> lease_;
};

}  // namespace fencegate::testing

#endif  // TESTS_ETCD_SERVER_H_
