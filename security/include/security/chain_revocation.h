// Copyright fencegate authors.
//
// ChainRevocation: checks a client's certificate chain against the CRLs of
// --tls_crl_dir, every certificate of it and not only the leaf (rule 12 of
// docs/security.md). gRPC 1.51 checks CRLs too, but ignores "unable to get
// CRL", so a leaf under an intermediate CA with no CRL in the directory
// would go unchecked. This check does not: each certificate of the chain,
// from the leaf up to a CA of --tls_client_ca, must have its issuer's CRL
// in the directory and must not be revoked by it.
//
// The gateway runs it as the TLS handshake's certificate verifier
// (ChainRevocationVerifier), after gRPC's own verification of the chain.

#ifndef SECURITY_CHAIN_REVOCATION_H_
#define SECURITY_CHAIN_REVOCATION_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/security/tls_certificate_verifier.h"

// OpenSSL's certificate store, kept opaque here.
struct x509_store_st;

namespace fencegate {

// Thread safety: Check() is safe for concurrent use.
class ChainRevocation {
 public:
  // `client_ca`: the PEM bundle of trusted client CAs; `crl_dir`: the CRL
  // directory (files <issuer subject hash>.r<N>, as CheckCrlDir accepts).
  // Both are read on first use and again when `refresh` has passed since,
  // so a new CRL takes effect as a rotated certificate does. A read that
  // fails (a CRL caught mid-rewrite, say) keeps the last good ones.
  ChainRevocation(std::string client_ca, std::string crl_dir,
                  absl::Duration refresh);
  ChainRevocation(const ChainRevocation&) = delete;
  ChainRevocation& operator=(const ChainRevocation&) = delete;
  ~ChainRevocation();

  // OK if `leaf_pem`, with the certificates in `chain_pem` (PEM, as the
  // client sent them; may repeat the leaf, may be empty), chains up to a
  // CA of the bundle, and no certificate of that chain is revoked or lacks
  // its issuer's CRL. UNAUTHENTICATED naming the certificate and the reason
  // otherwise ("certificate revoked", "unable to get certificate CRL", ...);
  // UNAVAILABLE if the bundle or a CRL cannot be read.
  absl::Status Check(absl::string_view leaf_pem, absl::string_view chain_pem)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Store = std::shared_ptr<x509_store_st>;
  // The store of CAs and CRLs, re-read (by one caller, without the lock;
  // the others keep using the store they have) when `refresh` has passed.
  // A read that fails keeps the last good store, logged; with none yet,
  // the error.
  absl::StatusOr<Store> CurrentStore() ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<Store> LoadStore() const;

  const std::string client_ca_;
  const std::string crl_dir_;
  const absl::Duration refresh_;
  absl::Mutex mu_;
  Store store_ ABSL_GUARDED_BY(mu_);
  absl::Time loaded_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // A read of the files is under way.
  bool loading_ ABSL_GUARDED_BY(mu_) = false;
};

// A TLS certificate verifier that refuses a handshake whose client chain
// `revocation` refuses, synchronously (the check reads memory only, except
// when the files are re-read). Each refusal is logged with its reason.
std::shared_ptr<grpc::experimental::CertificateVerifier>
ChainRevocationVerifier(std::shared_ptr<ChainRevocation> revocation);

}  // namespace fencegate

#endif  // SECURITY_CHAIN_REVOCATION_H_
