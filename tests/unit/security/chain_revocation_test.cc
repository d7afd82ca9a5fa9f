// Copyright fencegate authors.
//
// ChainRevocation (security/chain_revocation.h): every certificate of a
// client's chain is checked against the CRLs of --tls_crl_dir, and one
// whose issuer has no CRL there is refused, on a root, an intermediate and
// leaves made with the openssl command.

#include "security/chain_revocation.h"

#include <filesystem>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fixtures.h"
#include "tests/test_certs.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

using ::fencegate::testing::StatusIs;
using ::fencegate::testing::TestPki;
using ::testing::HasSubstr;

class ChainRevocationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(root, TestPki::Create(dir_.path(), "chain-root"));
    root_ = std::move(root);
    ASSERT_OK_AND_ASSIGN(intermediate, root_->IssueCa("chain-intermediate"));
    intermediate_ = std::move(intermediate);
    ASSERT_OK_AND_ASSIGN(leaf, intermediate_->Issue("leaf", "leaf", ""));
    leaf_ = leaf;
    ASSERT_OK_AND_ASSIGN(direct, root_->Issue("direct", "direct", ""));
    direct_ = direct;
    crl_dir_ = dir_.path() + "/crl";
    std::filesystem::create_directory(crl_dir_);
    // Re-read on every check, so that each test's CRLs take effect at once.
    revocation_ = std::make_unique<ChainRevocation>(root_->ca(), crl_dir_,
                                                    absl::ZeroDuration());
  }

  // Checks `leaf` presented with the intermediate CA's certificate.
  absl::Status CheckUnderIntermediate(const testing::CertFiles& leaf) {
    return revocation_->Check(testing::ReadFile(leaf.cert).value(),
                              testing::ReadFile(intermediate_->ca()).value());
  }

  testing::TempDir dir_;
  std::unique_ptr<TestPki> root_;
  std::unique_ptr<TestPki> intermediate_;
  testing::CertFiles leaf_;
  testing::CertFiles direct_;
  std::string crl_dir_;
  std::unique_ptr<ChainRevocation> revocation_;
};

TEST_F(ChainRevocationTest, AChainWhoseEveryIssuerHasACrlPasses) {
  ASSERT_TRUE(root_->WriteCrl({}, crl_dir_).ok());
  ASSERT_TRUE(intermediate_->WriteCrl({}, crl_dir_).ok());
  EXPECT_OK(CheckUnderIntermediate(leaf_));
  // A leaf of the root itself, sent without a chain.
  EXPECT_OK(revocation_->Check(testing::ReadFile(direct_.cert).value(), ""));
}

// Rule 12: a leaf whose issuing intermediate has no CRL in the directory
// is refused (gRPC's own check lets it through).
TEST_F(ChainRevocationTest, AnIntermediateWithoutACrlIsRefused) {
  ASSERT_TRUE(root_->WriteCrl({}, crl_dir_).ok());
  const absl::Status s = CheckUnderIntermediate(leaf_);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("unable to get certificate CRL"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("/CN=leaf"));
}

// Rule 12: an intermediate CA that the root's CRL revokes takes every
// leaf under it down with it.
TEST_F(ChainRevocationTest, ARevokedIntermediateRefusesItsLeaves) {
  ASSERT_TRUE(root_->WriteCrl({intermediate_->ca()}, crl_dir_).ok());
  ASSERT_TRUE(intermediate_->WriteCrl({}, crl_dir_).ok());
  const absl::Status s = CheckUnderIntermediate(leaf_);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT(std::string(s.message()), HasSubstr("certificate revoked"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("/CN=chain-intermediate"));
  // The root's other leaves are not revoked.
  EXPECT_OK(revocation_->Check(testing::ReadFile(direct_.cert).value(), ""));
}

TEST_F(ChainRevocationTest, ALeafRevokedByItsIntermediateIsRefused) {
  ASSERT_TRUE(root_->WriteCrl({}, crl_dir_).ok());
  ASSERT_TRUE(intermediate_->WriteCrl({leaf_.cert}, crl_dir_).ok());
  EXPECT_THAT(CheckUnderIntermediate(leaf_),
              StatusIs(absl::StatusCode::kUnauthenticated));
  // A newer CRL of the intermediate that no longer lists it lets it in.
  ASSERT_TRUE(intermediate_->WriteCrl({}, crl_dir_, /*suffix=*/1).ok());
  EXPECT_OK(CheckUnderIntermediate(leaf_));
}

TEST_F(ChainRevocationTest, AChainThatReachesNoTrustedCaIsRefused) {
  ASSERT_TRUE(root_->WriteCrl({}, crl_dir_).ok());
  ASSERT_TRUE(intermediate_->WriteCrl({}, crl_dir_).ok());
  // The intermediate left out: the leaf's issuer is unknown.
  EXPECT_THAT(revocation_->Check(testing::ReadFile(leaf_.cert).value(), ""),
              StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT(revocation_->Check("", ""),
              StatusIs(absl::StatusCode::kUnauthenticated));
}

}  // namespace
}  // namespace fencegate
