// Copyright fencegate authors.
//
// The gRPC port's TLS: server credentials from PEM files that gRPC's file
// watcher re-reads every `refresh`, so that a renewed certificate or CA
// bundle takes effect without a restart and without dropping connections
// (new handshakes use the new files; open connections keep theirs). With a
// client CA, every client must present a certificate that CA signed and
// that has not expired (mTLS).

#ifndef GATEWAY_SERVER_TLS_H_
#define GATEWAY_SERVER_TLS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/security/server_credentials.h"

namespace fencegate {

struct ServerTlsOptions {
  // PEM certificate chain and private key. Both empty: plaintext.
  std::string cert;
  std::string key;
  // PEM CA bundle for client certificates; empty: no client certificates.
  std::string client_ca;
  // How often the files are re-read. Default: 5 s.
  absl::Duration refresh = absl::Seconds(5);

  bool enabled() const { return !cert.empty() || !key.empty(); }
};

// Plaintext credentials if `options` is not enabled. INVALID_ARGUMENT naming
// the file if one cannot be read or holds no PEM block, or if only one of
// cert and key is given, or a client CA without them.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const ServerTlsOptions& options);

}  // namespace fencegate

#endif  // GATEWAY_SERVER_TLS_H_
