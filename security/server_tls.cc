// Copyright fencegate authors.

#include "security/server_tls.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "fencegate/client/tls.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"
#include "security/chain_revocation.h"
#include "security/crl_dir.h"

namespace fencegate {
namespace {

absl::Status CheckPem(const std::string& path, absl::string_view what) {
  return client::ReadPemFile(path, what).status();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const ServerTlsOptions& options) {
  if (!options.enabled()) {
    if (!options.crl_dir.empty()) {
      return absl::InvalidArgumentError(
          "tls.crl_dir: needs tls.cert, tls.key and tls.client_ca");
    }
    if (!options.client_ca.empty()) {
      return absl::InvalidArgumentError(
          "tls.client_ca: needs tls.cert and tls.key (mTLS is TLS first)");
    }
    return grpc::InsecureServerCredentials();
  }
  if (options.cert.empty() || options.key.empty()) {
    return absl::InvalidArgumentError(
        "tls: the certificate and its key go together; give both");
  }
  if (absl::Status s = CheckPem(options.cert, "tls.cert"); !s.ok()) return s;
  if (absl::Status s = CheckPem(options.key, "tls.key"); !s.ok()) return s;
  if (!options.client_ca.empty()) {
    if (absl::Status s = CheckPem(options.client_ca, "tls.client_ca");
        !s.ok()) {
      return s;
    }
  }
  if (!options.crl_dir.empty()) {
    if (options.client_ca.empty()) {
      return absl::InvalidArgumentError(
          "tls.crl_dir: needs tls.client_ca (it revokes client certificates)");
    }
    if (absl::Status s =
            CheckCrlDir(options.crl_dir, options.client_ca, absl::Now());
        !s.ok()) {
      return s;
    }
  }
  const unsigned refresh_seconds = static_cast<unsigned>(
      std::max<int64_t>(1, absl::ToInt64Seconds(options.refresh)));
  auto provider =
      std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
          options.key, options.cert, options.client_ca, refresh_seconds);
  grpc::experimental::TlsServerCredentialsOptions tls(provider);
  tls.watch_identity_key_cert_pairs();
  if (!options.client_ca.empty()) {
    tls.watch_root_certs();
    tls.set_cert_request_type(
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    if (!options.crl_dir.empty()) {
      tls.set_crl_directory(options.crl_dir);
      // gRPC's own check skips a chain element whose CRL is missing: this
      // one refuses it, and checks every element of the chain.
      tls.set_certificate_verifier(ChainRevocationVerifier(
          std::make_shared<ChainRevocation>(options.client_ca, options.crl_dir,
                                            absl::Seconds(refresh_seconds))));
    }
  } else {
    tls.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  return grpc::experimental::TlsServerCredentials(tls);
}

}  // namespace fencegate
