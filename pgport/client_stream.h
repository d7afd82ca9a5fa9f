// Copyright fencegate authors.
//
// ClientStream: a PostgreSQL port session's connection to its client: TCP,
// and TLS over it from the moment the client asked for TLS (SSLRequest)
// and the handshake succeeded. Reads and writes go through TLS from then on.
//
// Thread safety: none; the session's coroutines on the port's thread, with
// at most one read and one write under way at once (asio's ssl::stream
// allows the two together).

#ifndef PGPORT_CLIENT_STREAM_H_
#define PGPORT_CLIENT_STREAM_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "boost/asio/ssl.hpp"
#include "pgport/asio.h"

namespace fencegate::pgport {

class ClientStream {
 public:
  explicit ClientStream(tcp::socket socket) : socket_(std::move(socket)) {}

  // The TLS handshake as the server, with `context` (held as long as the
  // stream). UNAVAILABLE naming OpenSSL's reason if it fails (the client
  // refused the certificate, or presented none or a bad one).
  asio::awaitable<absl::Status> StartTls(
      std::shared_ptr<asio::ssl::context> context);
  bool tls() const { return tls_ != nullptr; }
  // The client's certificate, verified by the handshake; null without TLS
  // or without a certificate. Valid as long as the stream.
  const x509_st* peer_certificate() const;
  // The client's certificate, PEM; empty without one.
  std::string PeerCertificatePem() const;
  // The certificates the client sent above its own, PEM; may be empty.
  std::string PeerChainPem() const;

  asio::awaitable<size_t> ReadSome(asio::mutable_buffer room,
                                   boost::system::error_code& ec);
  // Writes all of `bytes`; UNAVAILABLE if the write failed.
  asio::awaitable<absl::Status> WriteAll(const std::string& bytes);

  tcp::socket::executor_type get_executor() { return socket_.get_executor(); }
  bool is_open() const { return socket_.is_open(); }
  // Closes the socket at once (no TLS close_notify: the session is over).
  void Close();

 private:
  tcp::socket socket_;
  std::shared_ptr<asio::ssl::context> context_;
  std::unique_ptr<asio::ssl::stream<tcp::socket&>> tls_;
};

}  // namespace fencegate::pgport

#endif  // PGPORT_CLIENT_STREAM_H_
