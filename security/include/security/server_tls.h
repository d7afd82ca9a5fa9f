// Copyright fencegate authors.
//
// The gRPC port's TLS: server credentials from PEM files that gRPC's file
// watcher re-reads every `refresh`, so that a renewed certificate or CA
// bundle takes effect without a restart and without dropping connections
// (new handshakes use the new files; open connections keep theirs). With a
// client CA, every client must present a certificate that CA signed and
// that has not expired (mTLS). With a CRL directory, a client certificate
// its CA's CRL revokes is refused too (security/crl_dir.h has what start-up
// checks in it). OpenSSL reads the directory by issuer hash when it
// verifies a client and keeps what it read: a newer CRL takes effect once
// it is added under the next suffix (<hash>.r1, ...), not by rewriting a
// file it already read. gRPC 1.51 ignores a CA with no CRL (its
// certificates go unchecked) and refuses every certificate of a CA whose
// CRL has expired.

#ifndef SECURITY_SERVER_TLS_H_
#define SECURITY_SERVER_TLS_H_

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
  // Directory of CRLs for client certificates, named <issuer hash>.r<N>;
  // empty: no revocation check. Needs client_ca.
  std::string crl_dir;
  // How often the files are re-read. Default: 5 s.
  absl::Duration refresh = absl::Seconds(5);

  bool enabled() const { return !cert.empty() || !key.empty(); }
};

// Plaintext credentials if `options` is not enabled. INVALID_ARGUMENT naming
// the file if one cannot be read or holds no PEM block, or if only one of
// cert and key is given, or a client CA without them, or a CRL directory
// without a client CA or that CheckCrlDir refuses.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const ServerTlsOptions& options);

}  // namespace fencegate

#endif  // SECURITY_SERVER_TLS_H_
