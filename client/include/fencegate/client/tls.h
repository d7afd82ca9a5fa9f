// Copyright fencegate authors.
//
// Client-side TLS: the channel credentials every fencegate client uses
// (fencectl, LeaseTokenSource's channel, the etcd clients), from PEM files.
//
//   TlsFiles tls{.ca = "ca.pem", .cert = "worker.pem", .key = "worker.key"};
//   absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds =
//       ChannelCredentials(tls);
//
// `ca` verifies the server's certificate (its name must match the address
// dialled); `cert` and `key` are this client's certificate, for a server that
// asks for one (mTLS). With every field empty the channel is plaintext.

#ifndef CLIENT_TLS_H_
#define CLIENT_TLS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/security/credentials.h"

namespace fencegate::client {

struct TlsFiles {
  // PEM bundle of the CAs the server's certificate must chain to. Required
  // for TLS; empty with `cert` and `key` empty means plaintext.
  std::string ca;
  // PEM certificate chain and private key of this client; both or neither.
  std::string cert;
  std::string key;

  bool enabled() const { return !ca.empty() || !cert.empty() || !key.empty(); }
};

// The contents of a PEM file. INVALID_ARGUMENT naming `what` and the path if
// it cannot be read or holds no PEM block. Also used by the gateway for its
// own certificate files.
absl::StatusOr<std::string> ReadPemFile(const std::string& path,
                                        absl::string_view what);

// TlsFiles from the environment: FENCEGATE_TLS_CA, FENCEGATE_TLS_CERT and
// FENCEGATE_TLS_KEY, each only where `files` leaves the field empty.
TlsFiles WithTlsEnvironment(TlsFiles files);

// Reads the files once. INVALID_ARGUMENT naming the file if one cannot be
// read or is not PEM, if `cert` is given without `key` or the reverse, or if
// a client certificate is given without `ca`.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(
    const TlsFiles& files);

}  // namespace fencegate::client

#endif  // CLIENT_TLS_H_
