// Copyright fencegate authors.
//
// CheckCrlDir: what --tls_crl_dir must hold before the gateway serves with
// it (security/crl_dir.h), on CRLs made with the openssl command.

#include "security/crl_dir.h"

#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_certs.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

using ::fencegate::testing::TestPki;
using ::testing::HasSubstr;

class CrlDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(pki, TestPki::Create(dir_.path(), "crl-ca"));
    pki_ = std::move(pki);
    ASSERT_OK_AND_ASSIGN(client, pki_->Issue("client", "client", ""));
    client_ = client;
    crl_dir_ = dir_.path() + "/crl";
    std::filesystem::create_directory(crl_dir_);
  }

  absl::Status Check() const {
    return CheckCrlDir(crl_dir_, pki_->ca(), absl::Now());
  }

  testing::TempDir dir_;
  std::unique_ptr<TestPki> pki_;
  testing::CertFiles client_;
  std::string crl_dir_;
};

TEST_F(CrlDirTest, ACrlForEveryClientCaPasses) {
  ASSERT_TRUE(pki_->WriteCrl({client_.cert}, crl_dir_).ok());
  ASSERT_TRUE(pki_->WriteCrl({}, crl_dir_, /*suffix=*/1).ok());
  testing::WriteFileOrDie(crl_dir_ + "/README", "not looked up\n");
  EXPECT_TRUE(Check().ok()) << Check();
}

TEST_F(CrlDirTest, AClientCaWithoutACrlIsNamed) {
  EXPECT_THAT(std::string(Check().message()),
              HasSubstr("no CRL for client CA \"/CN=crl-ca\""));
  // Nor does another CA's CRL stand in for it.
  testing::TempDir other_dir;
  ASSERT_OK_AND_ASSIGN(other, TestPki::Create(other_dir.path(), "other-ca"));
  ASSERT_TRUE(other->WriteCrl({}, crl_dir_).ok());
  EXPECT_THAT(std::string(Check().message()),
              HasSubstr("no CRL for client CA \"/CN=crl-ca\""));
}

TEST_F(CrlDirTest, AnExpiredCrlIsRefused) {
  ASSERT_OK_AND_ASSIGN(path, pki_->WriteCrl({}, crl_dir_, 0, /*expired=*/true));
  EXPECT_THAT(std::string(Check().message()),
              HasSubstr(path + " (CRL of \"/CN=crl-ca\") has expired"));
  // Judged at the time given: the same CRL before it expired passes.
  EXPECT_TRUE(
      CheckCrlDir(crl_dir_, pki_->ca(), absl::Now() - absl::Hours(36)).ok());
}

TEST_F(CrlDirTest, ACertificateLinkIsRefused) {
  ASSERT_TRUE(pki_->WriteCrl({}, crl_dir_).ok());
  const std::string link = crl_dir_ + "/0badcafe.0";
  std::filesystem::copy_file(pki_->ca(), link);
  EXPECT_THAT(std::string(Check().message()),
              HasSubstr(link + " is named like a certificate link"));
}

TEST_F(CrlDirTest, ACrlUnderAnotherNameOrNotACrlIsRefused) {
  ASSERT_OK_AND_ASSIGN(path, pki_->WriteCrl({}, crl_dir_));
  std::filesystem::copy_file(path, crl_dir_ + "/0badcafe.r0");
  EXPECT_THAT(std::string(Check().message()),
              HasSubstr("0badcafe.r0 is the CRL of \"/CN=crl-ca\""));
  std::filesystem::remove(crl_dir_ + "/0badcafe.r0");
  testing::WriteFileOrDie(crl_dir_ + "/0badcafe.r1", "garbage\n");
  EXPECT_THAT(std::string(Check().message()),
              HasSubstr("0badcafe.r1 is not a PEM certificate revocation "
                        "list"));
}

}  // namespace
}  // namespace fencegate
