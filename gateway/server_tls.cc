// Copyright fencegate authors.

#include "gateway/server_tls.h"

#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/tls.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"

namespace fencegate {
namespace {

absl::Status CheckPem(const std::string& path, absl::string_view what) {
  return client::ReadPemFile(path, what).status();
}

// Every CA certificate in the PEM bundle `client_ca` has a CRL in `dir`
// under the name OpenSSL looks for first (<subject hash>.r0).
absl::Status CheckCrlDir(const std::string& dir, const std::string& client_ca) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls.crl_dir: ", dir, " is not a directory"));
  }
  std::unique_ptr<FILE, int (*)(FILE*)> in(std::fopen(client_ca.c_str(), "r"),
                                           &std::fclose);
  if (in == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls.client_ca: cannot read ", client_ca));
  }
  int cas = 0;
  while (true) {
    std::unique_ptr<X509, void (*)(X509*)> ca(
        PEM_read_X509(in.get(), nullptr, nullptr, nullptr), &X509_free);
    if (ca == nullptr) break;
    ++cas;
    const std::string crl =
        absl::StrFormat("%s/%08lx.r0", dir,
                        X509_NAME_hash_ex(X509_get_subject_name(ca.get()),
                                          nullptr, nullptr, nullptr));
    if (::stat(crl.c_str(), &st) != 0) {
      char name[256];
      X509_NAME_oneline(X509_get_subject_name(ca.get()), name, sizeof(name));
      return absl::InvalidArgumentError(absl::StrCat(
          "tls.crl_dir: no CRL for client CA \"", name, "\" (expected ", crl,
          "; `openssl rehash` names them): every certificate it signed "
          "would be refused"));
    }
  }
  if (cas == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls.client_ca: no certificate in ", client_ca));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const ServerTlsOptions& options) {
  if (!options.enabled()) {
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
    if (absl::Status s = CheckCrlDir(options.crl_dir, options.client_ca);
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
    if (!options.crl_dir.empty()) tls.set_crl_directory(options.crl_dir);
  } else {
    tls.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  return grpc::experimental::TlsServerCredentials(tls);
}

}  // namespace fencegate
