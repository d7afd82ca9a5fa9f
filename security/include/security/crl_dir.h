// Copyright fencegate authors.
//
// CheckCrlDir: the start-up check of --tls_crl_dir, the directory of
// certificate revocation lists gRPC hands to OpenSSL for client
// certificates (security/server_tls.h).
//
// What it guards against, each a way the directory would silently not do
// its job:
//   - a client CA with no CRL: gRPC 1.51 ignores "unable to get CRL", so
//     that CA's certificates would never be checked for revocation;
//   - an expired CRL: OpenSSL then refuses every certificate of its CA;
//   - a file named like a certificate link (<hash>.0, as `openssl rehash`
//     names certificates): OpenSSL reads the directory for certificates as
//     well, and would trust it as a client CA beside --tls_client_ca;
//   - a CRL file that does not parse, or whose name is not its issuer's
//     subject hash (OpenSSL would never find it).

#ifndef SECURITY_CRL_DIR_H_
#define SECURITY_CRL_DIR_H_

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace fencegate {

// OK if `dir` is a directory in which every CA of the PEM bundle
// `client_ca` has its CRL <subject hash>.r0, every <hash>.r<N> file is a
// PEM CRL of issuer <hash> whose next update is after `now`, and nothing is
// named like a certificate link. INVALID_ARGUMENT naming the file or the CA
// otherwise.
absl::Status CheckCrlDir(const std::string& dir, const std::string& client_ca,
                         absl::Time now);

}  // namespace fencegate

#endif  // SECURITY_CRL_DIR_H_
