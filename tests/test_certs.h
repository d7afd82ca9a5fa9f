// Copyright fencegate authors.
//
// TestPki: a certificate authority and the certificates it issues, made at
// test time with the `openssl` command (EC P-256 keys), so that no key is
// ever committed. Shared by the tests and the benchmark harness.

#ifndef TESTS_TEST_CERTS_H_
#define TESTS_TEST_CERTS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fencegate::testing {

struct CertFiles {
  std::string cert;  // PEM certificate
  std::string key;   // PEM private key
};

class TestPki {
 public:
  // Makes a self-signed CA "<name>" in `dir` (which must exist).
  static absl::StatusOr<std::unique_ptr<TestPki>> Create(
      const std::string& dir, const std::string& name = "test-ca");

  // The CA's certificate (the bundle clients and servers trust).
  const std::string& ca() const { return ca_.cert; }

  // Issues a certificate for subject CN `cn` with the subjectAltName list
  // `san` (e.g. "URI:spiffe://example.org/w,DNS:localhost"; empty: none),
  // valid for `days` (negative: already expired), into <dir>/<file>.pem and
  // <file>.key. Re-issuing to the same file replaces it atomically (a new
  // file renamed over the old), as certificate rotation should.
  absl::StatusOr<CertFiles> Issue(const std::string& file,
                                  const std::string& cn, const std::string& san,
                                  int days = 2) const;
  // Issue() with a whole subject in openssl's -subj form ("/CN=a/CN=b").
  absl::StatusOr<CertFiles> IssueSubject(const std::string& file,
                                         const std::string& subject,
                                         const std::string& san,
                                         int days = 2) const;

  // Writes this CA's CRL revoking `revoked` (paths of certificates it
  // issued) into `crl_dir` as <CA subject hash>.r<suffix>, the name OpenSSL
  // looks up (a newer CRL goes under the next suffix); `expired`: its next
  // update was yesterday. Returns its path.
  absl::StatusOr<std::string> WriteCrl(const std::vector<std::string>& revoked,
                                       const std::string& crl_dir,
                                       int suffix = 0,
                                       bool expired = false) const;

  // An intermediate CA "<name>" that this CA signs (CA:TRUE, may sign
  // certificates and CRLs), in this CA's directory as <name>.pem and
  // <name>.key, valid for `days`.
  absl::StatusOr<std::unique_ptr<TestPki>> IssueCa(const std::string& name,
                                                   int days = 30) const;

  // Writes `leaf`'s certificate followed by `issuers` (PEM files) into
  // <dir>/<file>.pem, the chain a client presents; returns its files (the
  // key is the leaf's).
  absl::StatusOr<CertFiles> Chain(
      const std::string& file, const CertFiles& leaf,
      const std::vector<std::string>& issuers) const;

  // A server certificate for 127.0.0.1 and localhost.
  absl::StatusOr<CertFiles> IssueServer(const std::string& file) const {
    return Issue(file, "localhost", "DNS:localhost,IP:127.0.0.1");
  }

 private:
  TestPki(std::string dir, CertFiles ca)
      : dir_(std::move(dir)), ca_(std::move(ca)) {}
  std::string dir_;
  CertFiles ca_;
};

}  // namespace fencegate::testing

#endif  // TESTS_TEST_CERTS_H_
