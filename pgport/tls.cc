// Copyright fencegate authors.

#include "pgport/tls.h"

#include <openssl/ssl.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "observability/log.h"

namespace fencegate::pgport {
namespace {

constexpr unsigned char kSessionIdContext[] = "fencegate-pg";

absl::Status FileError(absl::string_view what, const std::string& path,
                       const boost::system::error_code& ec) {
  return absl::InvalidArgumentError(absl::StrCat(
      "pg TLS: cannot use ", what, " \"", path, "\": ", ec.message()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<PortTls>> PortTls::Create(
    const ServerTlsOptions& options, bool require_client_certificate,
    const RunBlocking* run_blocking) {
  if (!options.enabled()) {
    return absl::InvalidArgumentError("pg TLS: no certificate and key");
  }
  std::unique_ptr<PortTls> tls(
      new PortTls(options, require_client_certificate, run_blocking));
  absl::StatusOr<std::shared_ptr<asio::ssl::context>> context = tls->Load();
  if (!context.ok()) return context.status();
  absl::MutexLock lock(&tls->mu_);
  tls->context_ = *std::move(context);
  tls->loaded_at_ = absl::Now();
  return tls;
}

PortTls::PortTls(ServerTlsOptions options, bool require_client_certificate,
                 const RunBlocking* run_blocking)
    : options_(std::move(options)),
      require_client_certificate_(require_client_certificate),
      run_blocking_(run_blocking) {
  if (!options_.crl_dir.empty()) {
    revocation_ = std::make_unique<ChainRevocation>(
        options_.client_ca, options_.crl_dir, options_.refresh);
  }
}

absl::StatusOr<std::shared_ptr<asio::ssl::context>> PortTls::Load() const {
  auto context =
      std::make_shared<asio::ssl::context>(asio::ssl::context::tls_server);
  SSL_CTX* ctx = context->native_handle();
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  // Verified clients' sessions are cached under this name; OpenSSL refuses
  // to resume one without it.
  SSL_CTX_set_session_id_context(ctx, kSessionIdContext,
                                 sizeof(kSessionIdContext) - 1);
  boost::system::error_code ec;
  context->use_certificate_chain_file(options_.cert, ec);
  if (ec) return FileError("the certificate", options_.cert, ec);
  context->use_private_key_file(options_.key, asio::ssl::context::pem, ec);
  if (ec) return FileError("the key", options_.key, ec);
  if (!options_.client_ca.empty()) {
    context->load_verify_file(options_.client_ca, ec);
    if (ec) return FileError("the client CA", options_.client_ca, ec);
    // Tells clients which CAs' certificates the port accepts.
    if (STACK_OF(X509_NAME)* names =
            SSL_load_client_CA_file(options_.client_ca.c_str());
        names != nullptr) {
      SSL_CTX_set_client_CA_list(ctx, names);
    }
    context->set_verify_mode(asio::ssl::verify_peer |
                             (require_client_certificate_
                                  ? asio::ssl::verify_fail_if_no_peer_cert
                                  : 0));
  }
  return context;
}

std::shared_ptr<asio::ssl::context> PortTls::Context() {
  absl::MutexLock lock(&mu_);
  if (!reloading_ && run_blocking_ != nullptr &&
      absl::Now() - loaded_at_ >= options_.refresh) {
    reloading_ = true;
    (*run_blocking_)([this] {
      absl::StatusOr<std::shared_ptr<asio::ssl::context>> context = Load();
      absl::MutexLock lock(&mu_);
      reloading_ = false;
      loaded_at_ = absl::Now();
      if (!context.ok()) {
        Log(LogSeverity::kWarning,
            absl::StrCat(context.status().message(),
                         "; the PostgreSQL port keeps its last certificate"));
        return;
      }
      context_ = *std::move(context);
    });
  }
  return context_;
}

absl::Status PortTls::CheckRevocation(const std::string& leaf_pem,
                                      const std::string& chain_pem) const {
  if (revocation_ == nullptr || leaf_pem.empty()) return absl::OkStatus();
  return revocation_->Check(leaf_pem, chain_pem);
}

}  // namespace fencegate::pgport
