// Copyright fencegate authors.

#include "pgport/client_stream.h"

#include <openssl/pem.h>
#include <openssl/ssl.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace fencegate::pgport {

asio::awaitable<absl::Status> ClientStream::StartTls(
    std::shared_ptr<asio::ssl::context> context) {
  context_ = std::move(context);
  tls_ = std::make_unique<asio::ssl::stream<tcp::socket&>>(socket_, *context_);
  boost::system::error_code ec;
  co_await tls_->async_handshake(asio::ssl::stream_base::server,
                                 asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    co_return absl::UnavailableError(
        absl::StrCat("TLS handshake failed: ", ec.message()));
  }
  co_return absl::OkStatus();
}

const x509_st* ClientStream::peer_certificate() const {
  if (tls_ == nullptr) return nullptr;
  // Only a certificate the handshake verified counts.
  SSL* ssl =
      const_cast<asio::ssl::stream<tcp::socket&>&>(*tls_).native_handle();
  if (SSL_get_verify_result(ssl) != X509_V_OK) return nullptr;
  return SSL_get0_peer_certificate(ssl);
}

namespace {

std::string Pem(const STACK_OF(X509) * certs, const X509* one) {
  BIO* bio = BIO_new(BIO_s_mem());
  if (one != nullptr) PEM_write_bio_X509(bio, const_cast<X509*>(one));
  for (int i = 0; certs != nullptr && i < sk_X509_num(certs); ++i) {
    PEM_write_bio_X509(bio, sk_X509_value(certs, i));
  }
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);  // NOLINT(runtime/int)
  std::string pem(data, static_cast<size_t>(n));
  BIO_free(bio);
  return pem;
}

}  // namespace

std::string ClientStream::PeerCertificatePem() const {
  const x509_st* leaf = peer_certificate();
  return leaf == nullptr ? "" : Pem(nullptr, leaf);
}

std::string ClientStream::PeerChainPem() const {
  if (peer_certificate() == nullptr) return "";
  SSL* ssl =
      const_cast<asio::ssl::stream<tcp::socket&>&>(*tls_).native_handle();
  // On the server's side the chain leaves the client's own certificate out.
  return Pem(SSL_get_peer_cert_chain(ssl), nullptr);
}

asio::awaitable<size_t> ClientStream::ReadSome(asio::mutable_buffer room,
                                               boost::system::error_code& ec) {
  if (tls_ != nullptr) {
    co_return co_await tls_->async_read_some(
        room, asio::redirect_error(asio::use_awaitable, ec));
  }
  co_return co_await socket_.async_read_some(
      room, asio::redirect_error(asio::use_awaitable, ec));
}

asio::awaitable<absl::Status> ClientStream::WriteAll(const std::string& bytes) {
  boost::system::error_code ec;
  if (tls_ != nullptr) {
    co_await asio::async_write(*tls_, asio::buffer(bytes),
                               asio::redirect_error(asio::use_awaitable, ec));
  } else {
    co_await asio::async_write(socket_, asio::buffer(bytes),
                               asio::redirect_error(asio::use_awaitable, ec));
  }
  if (ec) {
    co_return absl::UnavailableError(
        absl::StrCat("write failed: ", ec.message()));
  }
  co_return absl::OkStatus();
}

void ClientStream::Close() {
  boost::system::error_code ec;
  socket_.close(ec);
}

}  // namespace fencegate::pgport
