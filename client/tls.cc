// Copyright fencegate authors.

#include "fencegate/client/tls.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace fencegate::client {
absl::StatusOr<std::string> ReadPemFile(const std::string& path,
                                        absl::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " \"", path, "\" cannot be read"));
  }
  std::ostringstream data;
  data << in.rdbuf();
  if (!absl::StrContains(data.str(), "-----BEGIN ")) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " \"", path, "\" holds no PEM block"));
  }
  return data.str();
}

TlsFiles WithTlsEnvironment(TlsFiles files) {
  auto fill = [](std::string* field, const char* name) {
    if (!field->empty()) return;
    if (const char* v = std::getenv(name); v != nullptr) *field = v;
  };
  fill(&files.ca, "FENCEGATE_TLS_CA");
  fill(&files.cert, "FENCEGATE_TLS_CERT");
  fill(&files.key, "FENCEGATE_TLS_KEY");
  return files;
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(
    const TlsFiles& files) {
  if (!files.enabled()) return grpc::InsecureChannelCredentials();
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError(
        "TLS: a client certificate and its key go together; give both or "
        "neither");
  }
  if (files.ca.empty()) {
    return absl::InvalidArgumentError(
        "TLS: the CA bundle that signed the server's certificate is required");
  }
  grpc::SslCredentialsOptions options;
  absl::StatusOr<std::string> ca = ReadPemFile(files.ca, "TLS CA bundle");
  if (!ca.ok()) return ca.status();
  options.pem_root_certs = *std::move(ca);
  if (!files.cert.empty()) {
    absl::StatusOr<std::string> cert =
        ReadPemFile(files.cert, "TLS client certificate");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPemFile(files.key, "TLS client key");
    if (!key.ok()) return key.status();
    options.pem_cert_chain = *std::move(cert);
    options.pem_private_key = *std::move(key);
  }
  return grpc::SslCredentials(options);
}

}  // namespace fencegate::client
