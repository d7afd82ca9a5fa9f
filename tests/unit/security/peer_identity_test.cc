// Copyright fencegate authors.
//
// CertificateIdentity (security/peer_identity.h), the PostgreSQL port's
// reader of the identity rule, on certificates made with the openssl
// command: the first URI SAN, else the first DNS SAN, else the only CN, and
// nothing for a subject of several CNs or a CN spelled like a URI. The gRPC
// port's reader is tested end to end (TrustE2eTest.IdentityIs...).

#include "security/peer_identity.h"

#include <openssl/pem.h>
#include <openssl/x509.h>

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "tests/test_certs.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

using ::fencegate::testing::CertFiles;
using ::fencegate::testing::TestPki;

class PeerIdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(pki, TestPki::Create(dir_.path()));
    pki_ = std::move(pki);
  }

  // The identity of a certificate issued with `subject` and `san`.
  std::string IdentityOf(const std::string& subject, const std::string& san) {
    absl::StatusOr<CertFiles> files =
        pki_->IssueSubject(absl::StrCat("c", ++issued_), subject, san);
    EXPECT_TRUE(files.ok()) << files.status();
    if (!files.ok()) return "(not issued)";
    BIO* bio = BIO_new_file(files->cert.c_str(), "r");
    EXPECT_NE(bio, nullptr);
    if (bio == nullptr) return "(unreadable)";
    X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
    BIO_free(bio);
    EXPECT_NE(cert, nullptr);
    std::string identity = CertificateIdentity(cert);
    X509_free(cert);
    return identity;
  }

  testing::TempDir dir_;
  std::unique_ptr<TestPki> pki_;
  int issued_ = 0;
};

TEST_F(PeerIdentityTest, TheUriSanThenTheDnsSanThenTheOnlyCn) {
  EXPECT_EQ(IdentityOf("/CN=w",
                       "DNS:w.example.org,URI:spiffe://e.org/w,"
                       "URI:spiffe://e.org/second"),
            "spiffe://e.org/w");
  EXPECT_EQ(IdentityOf("/CN=w", "DNS:w.example.org,DNS:x.example.org"),
            "w.example.org");
  EXPECT_EQ(IdentityOf("/O=fencegate/CN=worker", ""), "worker");
}

TEST_F(PeerIdentityTest, NoIdentityWhenTheSubjectIsAmbiguous) {
  EXPECT_EQ(IdentityOf("/CN=a/CN=b", ""), "");
  // Spelled like a URI, a CN or DNS name would pass for one.
  EXPECT_EQ(IdentityOf("/CN=spiffe:worker", ""), "");
  EXPECT_EQ(IdentityOf("/CN=w", "DNS:spiffe:x"), "");
  EXPECT_EQ(CertificateIdentity(nullptr), "");
}

// A caller without an identity is its peer's address, whatever its port:
// every connection from one host is one caller.
TEST(PeerHostTest, DropsThePortOfAnAddress) {
  EXPECT_EQ(PeerHost("ipv4:10.0.0.1:5000"), "ipv4:10.0.0.1");
  EXPECT_EQ(PeerHost("ipv6:[::1]:5000"), "ipv6:[::1]");
  EXPECT_EQ(PeerHost("ipv6:%5B::1%5D:41234"), "ipv6:%5B::1%5D");
  EXPECT_EQ(PeerHost("unix:/run/fencegate.sock"), "unix:/run/fencegate.sock");
  EXPECT_EQ(PeerHost("ipv4:10.0.0.1"), "ipv4:10.0.0.1");  // No port.
  EXPECT_EQ(PeerHost(""), "");
}

}  // namespace
}  // namespace fencegate
