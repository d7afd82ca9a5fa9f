// Copyright fencegate authors.
//
// PortTls: TLS on the PostgreSQL port, from the gateway's own TLS files
// (security/server_tls.h; the same certificate serves both ports):
//
// - the server context a session's handshake uses, made again from the
//   files every `refresh` (off the port's thread), so that a renewed
//   certificate serves new sessions without a restart; a read that fails
//   keeps the last good context, logged;
// - with a client CA, a client certificate is verified against it (and
//   required, when `require_client_certificate`: a policy is in force);
// - with a CRL directory, each certificate of the client's chain must have
//   its issuer's CRL there and not be revoked by it
//   (security/chain_revocation.h), as on the gRPC port.
//
// Thread safety: Context() and Check() from any thread.

#ifndef PGPORT_TLS_H_
#define PGPORT_TLS_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "boost/asio/ssl.hpp"
#include "pgport/asio.h"
#include "security/chain_revocation.h"
#include "security/server_tls.h"

namespace fencegate::pgport {

class PortTls {
 public:
  using RunBlocking =
      absl::AnyInvocable<void(absl::AnyInvocable<void() &&>) const>;

  // Reads the files once. INVALID_ARGUMENT naming the file that cannot be
  // used, or if `options` is not enabled. `run_blocking` re-reads them
  // later; it must outlive the PortTls.
  static absl::StatusOr<std::unique_ptr<PortTls>> Create(
      const ServerTlsOptions& options, bool require_client_certificate,
      const RunBlocking* run_blocking);

  // The context for a new handshake. Never blocks: when `refresh` has
  // passed, it asks for a new one and hands out the current one meanwhile.
  std::shared_ptr<asio::ssl::context> Context() ABSL_LOCKS_EXCLUDED(mu_);

  // A CRL directory is configured: CheckRevocation() has work to do.
  bool checks_revocation() const { return revocation_ != nullptr; }

  // With a CRL directory: OK unless a certificate of the client's chain
  // (`leaf_pem`, `chain_pem`: ClientStream's) is revoked or lacks its
  // issuer's CRL; UNAUTHENTICATED saying which. OK without one. Blocks
  // (reads the CRLs when `refresh` has passed): not on the port's thread.
  absl::Status CheckRevocation(const std::string& leaf_pem,
                               const std::string& chain_pem) const;

 private:
  PortTls(ServerTlsOptions options, bool require_client_certificate,
          const RunBlocking* run_blocking);
  absl::StatusOr<std::shared_ptr<asio::ssl::context>> Load() const;

  const ServerTlsOptions options_;
  const bool require_client_certificate_;
  const RunBlocking* const run_blocking_;
  std::unique_ptr<ChainRevocation> revocation_;
  absl::Mutex mu_;
  std::shared_ptr<asio::ssl::context> context_ ABSL_GUARDED_BY(mu_);
  absl::Time loaded_at_ ABSL_GUARDED_BY(mu_);
  bool reloading_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace fencegate::pgport

#endif  // PGPORT_TLS_H_
