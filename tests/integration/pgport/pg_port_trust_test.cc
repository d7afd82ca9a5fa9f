// Copyright fencegate authors.
//
// The PostgreSQL port on a real network (docs/pgwire.md, "TLS, client
// certificates and the policy"): a gateway with mTLS, a policy and an
// audit log serves the port TLS only, signs a session in by its client
// certificate, applies the policy's domain, resource and token rules to
// each fenced transaction, audits its advances, and refuses revoked
// certificates and bytes smuggled in before the handshake. Clients are
// psql (libpq) and a raw socket, in front of a real PostgreSQL server.

#include <sys/stat.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "postgres/fence_schema.h"
#include "postgres/read_role.h"
#include "pqxx/pqxx"
#include "security/request_gate.h"
#include "security/scram.h"
#include "tests/fixtures.h"
#include "tests/postgres_adapter_fixture.h"
#include "tests/postgres_server.h"
#include "tests/trust_fixture.h"

namespace fencegate {
namespace {

using ::fencegate::testing::CertFiles;
using ::fencegate::testing::TestPki;
using ::testing::HasSubstr;

class PgPortTrustTest : public testing::TrustFixture {
 protected:
  static void SetUpTestSuite() {
    postgres_ = testing::StartSuiteServer(&start_error_);
    // The port serves a route only when its role cannot release the fence
    // its connection holds (pg-setup --revoke_session_functions).
    if (postgres_ != nullptr) {
      absl::StatusOr<std::vector<std::string>> revoked =
          postgres::RevokeSessionFunctions(postgres_->Conninfo(),
                                           "fencegate_worker", {});
      if (!revoked.ok()) start_error_ = revoked.status().ToString();
      // The read role of sessions without a token.
      ExecAsAdmin(*postgres_,
                  "DO $$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE "
                  "rolname = 'fencegate_reader') THEN CREATE ROLE "
                  "fencegate_reader LOGIN; END IF; END$$");
      if (absl::Status s =
              postgres::SetUpReadRole(postgres_->Conninfo(), "fencegate",
                                      "fencegate_reader", "fencegate_worker");
          !s.ok()) {
        start_error_ = s.ToString();
      }
    }
  }
  static void TearDownTestSuite() {
    delete postgres_;
    postgres_ = nullptr;
  }

  std::string Policy() const override {
    return TrustFixture::Policy() +
           absl::StrReplaceAll(R"(
      rule {
        identities: "$REPORTER"
        domain_prefixes: [ "jobs/", "reports/" ]
        resource_prefixes: "db/"
        permissions: [ WRITE ]
      }
      rule {
        identities: "$BILLING"
        domain_prefixes: "billing/"
        resource_prefixes: "db/"
        permissions: [ WRITE ]
      }
    )",
                               {{"$BILLING", testing::kBilling},
                                {"$REPORTER", testing::kReporterDns}});
  }

  void SetUp() override {
    ASSERT_NE(postgres_, nullptr) << start_error_;
    TrustFixture::SetUp();
    if (HasFatalFailure()) return;
    Exec("DROP TABLE IF EXISTS jobs");
    Exec("TRUNCATE fencegate.fences");
    Exec("CREATE TABLE jobs (id bigint PRIMARY KEY, owner text)");
    Exec("INSERT INTO jobs VALUES (1, 'nobody')");
    // libpq refuses a key others may read.
    for (const CertFiles* c : {&billing_, &reporter_, &nobody_}) {
      chmod(c->key.c_str(), 0600);
    }
    Start();
  }

  void Start(std::vector<std::string> extra = {}) {
    pg_port_ = testing::FreeLoopbackPort();
    extra.push_back("--route=db=" +
                    postgres_->Uri("read_user=fencegate_reader"));
    extra.push_back(absl::StrCat("--pg_listen=127.0.0.1:", pg_port_));
    StartGateway(extra);
  }

  static pqxx::result Exec(const std::string& sql) {
    return ExecAsAdmin(*postgres_, sql);
  }
  static std::string Owner() {
    return Exec("SELECT owner FROM jobs WHERE id = 1")[0][0].as<std::string>();
  }

  // psql -c `sql` through the port, presenting `client` (none if empty)
  // with `sslmode`; its exit code, with what it printed in `out` and `err`.
  int Psql(const CertFiles& client, const std::string& options,
           const std::string& sql, std::string* out, std::string* err,
           const std::string& sslmode = "verify-full",
           const std::string& password = "") const {
    const std::string none = dir_.path() + "/none";
    return testing::RunPsql(
        pg_port_, "db",
        {"PGOPTIONS=" + options, "PGPASSWORD=" + password,
         "PGSSLMODE=" + sslmode, "PGSSLROOTCERT=" + pki_->ca(),
         "PGSSLCERT=" + (client.cert.empty() ? none : client.cert),
         "PGSSLKEY=" + (client.key.empty() ? none : client.key)},
        {sql}, out, err);
  }

  static std::string Options(const std::string& domain, uint64_t token) {
    std::string options = absl::StrCat("-c fencegate.domain=", domain);
    if (token != 0) absl::StrAppend(&options, " -c fencegate.token=", token);
    return options;
  }

  // The audit records of the port's transactions.
  std::vector<v1::AuditRecord> PortRecords() const {
    std::vector<v1::AuditRecord> port;
    for (v1::AuditRecord& r : AuditRecords()) {
      if (r.rpc() == kPgTransactionMethod) port.push_back(std::move(r));
    }
    return port;
  }

  static testing::PostgresServer* postgres_;
  static std::string start_error_;
  int pg_port_ = 0;
};

testing::PostgresServer* PgPortTrustTest::postgres_ = nullptr;
std::string PgPortTrustTest::start_error_;

constexpr char kUpdate[] = "UPDATE jobs SET owner = 'written' WHERE id = 1";

TEST_F(PgPortTrustTest,
       ACertificateSignsInAndThePolicyGrantsItsDomainAndRoute) {
  std::string out, err;
  ASSERT_EQ(Psql(reporter_, Options("jobs/a", 5), kUpdate, &out, &err), 0)
      << err;
  EXPECT_EQ(Owner(), "written");
  // The advance is audited under the certificate's identity.
  ASSERT_TRUE(testing::WaitFor([&] { return !PortRecords().empty(); }));
  const v1::AuditRecord record = PortRecords().front();
  EXPECT_EQ(record.identity(), testing::kReporterDns);
  EXPECT_EQ(record.outcome(), "fence_advanced");
  EXPECT_EQ(record.domain(), "jobs/a");
  EXPECT_EQ(record.resource(), "db/");
  EXPECT_EQ(record.token(), 5u);

  Exec("UPDATE jobs SET owner = 'nobody'");
  // An identity no rule names, and a domain outside the identity's rule,
  // are refused at sign-in; nothing is written.
  EXPECT_NE(Psql(nobody_, Options("jobs/a", 6), kUpdate, &out, &err), 0);
  EXPECT_THAT(err, HasSubstr("spiffe://example.org/nobody")) << err;
  EXPECT_NE(Psql(reporter_, Options("billing/x", 6), kUpdate, &out, &err), 0);
  EXPECT_THAT(err, HasSubstr("billing/x")) << err;
  EXPECT_EQ(Owner(), "nobody");
  ASSERT_TRUE(testing::WaitFor([&] {
    for (const v1::AuditRecord& r : PortRecords()) {
      if (r.outcome() == "denied" && r.domain() == "billing/x") return true;
    }
    return false;
  })) << "the denial is audited";

  // Under a policy even a read-only session names its domain.
  EXPECT_NE(Psql(reporter_, "", "SELECT owner FROM jobs", &out, &err), 0);
  EXPECT_THAT(err, HasSubstr("needs fencegate.domain")) << err;
  ASSERT_EQ(Psql(reporter_, Options("jobs/a", 0), "SELECT owner FROM jobs",
                 &out, &err),
            0)
      << err;
  EXPECT_EQ(out, "nobody\n");
}

TEST_F(PgPortTrustTest, ThePortServesTlsOnlyAndWantsAClientCertificate) {
  std::string out, err;
  EXPECT_NE(
      Psql(reporter_, Options("jobs/a", 5), kUpdate, &out, &err, "disable"), 0);
  EXPECT_THAT(err, HasSubstr("serves TLS only")) << err;
  EXPECT_NE(
      Psql(CertFiles{}, Options("jobs/a", 5), kUpdate, &out, &err, "require"),
      0);
  testing::TempDir other_dir;
  ASSERT_OK_AND_ASSIGN(other, TestPki::Create(other_dir.path(), "other-ca"));
  ASSERT_OK_AND_ASSIGN(
      stranger, other->Issue("reporter", "reporter",
                             "DNS:" + std::string(testing::kReporterDns)));
  chmod(stranger.key.c_str(), 0600);
  EXPECT_NE(Psql(stranger, Options("jobs/a", 5), kUpdate, &out, &err), 0);
  EXPECT_EQ(Owner(), "nobody");
  // The same session with the CA's own certificate gets through: the
  // refusals above are the certificate's.
  ASSERT_EQ(Psql(reporter_, Options("jobs/a", 5), kUpdate, &out, &err), 0)
      << err;
  EXPECT_EQ(Owner(), "written");
}

TEST_F(PgPortTrustTest, TheDomainsTokenRulesApplyToEachTransaction) {
  std::string out, err;
  // billing/ takes its tokens from the lease service, which granted none.
  // Refused when the session starts, before its server connection holds
  // anything.
  EXPECT_NE(Psql(billing_, Options("billing/x", 7), kUpdate, &out, &err), 0);
  EXPECT_THAT(err, HasSubstr("token 7 refused")) << err;
  EXPECT_THAT(err, HasSubstr("lease service")) << err;
  // reports/ takes any token, but no more than 1000 above its fence.
  ASSERT_EQ(Psql(reporter_, Options("reports/r", 5), kUpdate, &out, &err), 0)
      << err;
  Exec("UPDATE jobs SET owner = 'nobody'");
  EXPECT_NE(Psql(reporter_, Options("reports/r", 5000), kUpdate, &out, &err),
            0);
  EXPECT_THAT(err, HasSubstr("max_advance")) << err;
  EXPECT_EQ(Owner(), "nobody");
  // The same token set in a session: an error with the port's SQLSTATE for
  // a token the rules refuse (FG006; FG002 is the database's fence()).
  EXPECT_NE(Psql(reporter_, Options("reports/r", 5),
                 {"SET fencegate.token = 5000"}, &out, &err),
            0);
  EXPECT_THAT(err, HasSubstr("FG006")) << err;
  ASSERT_TRUE(testing::WaitFor([&] {
    for (const v1::AuditRecord& r : PortRecords()) {
      if (r.outcome() == "token_refused" && r.token() == 5000) return true;
    }
    return false;
  })) << "the refused token is audited";
}

TEST_F(PgPortTrustTest, ARevokedCertificateIsRefused) {
  const std::string crl_dir = dir_.path() + "/crl";
  ASSERT_TRUE(std::filesystem::create_directory(crl_dir));
  ASSERT_TRUE(pki_->WriteCrl({reporter_.cert}, crl_dir).ok());
  Start({"--tls_crl_dir=" + crl_dir});
  std::string out, err;
  EXPECT_NE(Psql(reporter_, Options("jobs/a", 5), kUpdate, &out, &err), 0);
  EXPECT_THAT(err, HasSubstr("revoked")) << err;
  EXPECT_EQ(Owner(), "nobody");
  ASSERT_EQ(Psql(billing_, Options("billing/x", 0), "SELECT 1", &out, &err), 0)
      << err;
}

TEST_F(PgPortTrustTest, WithoutClientCertificatesAPasswordSignsInOverTls) {
  // A gateway with TLS but no client CA and no policy, and a user file.
  const std::string users = dir_.path() + "/users.txt";
  testing::WriteFileOrDie(
      users,
      absl::StrCat("\"worker\" \"",
                   MakeScramVerifier("right horse", "0123456789abcdef", 4096),
                   "\"\n"));
  pg_port_ = testing::FreeLoopbackPort();
  gateway_.reset();
  ASSERT_OK_AND_ASSIGN(
      gateway,
      testing::GatewayProcess::Start(
          dir_.path() + "/plain-data",
          {"--tls_cert=" + server_.cert, "--tls_key=" + server_.key,
           "--pg_user_file=" + users,
           "--route=db=" + postgres_->Uri("read_user=fencegate_reader"),
           absl::StrCat("--pg_listen=127.0.0.1:", pg_port_)}));
  gateway_ = std::move(gateway);
  std::string out, err;
  // libpq over TLS offers channel binding; the port does without it.
  ASSERT_EQ(Psql(CertFiles{}, Options("jobs/a", 5), kUpdate, &out, &err,
                 "verify-full", "right horse"),
            0)
      << err;
  EXPECT_EQ(Owner(), "written");
  EXPECT_NE(Psql(CertFiles{}, Options("jobs/a", 5), "SELECT 1", &out, &err,
                 "verify-full", "wrong horse"),
            0);
  EXPECT_THAT(err, HasSubstr("password authentication failed"));
  EXPECT_NE(Psql(CertFiles{}, Options("jobs/a", 5), "SELECT 1", &out, &err,
                 "disable", "right horse"),
            0);
  EXPECT_THAT(err, HasSubstr("serves TLS only"));
}

TEST_F(PgPortTrustTest, BytesSentBeforeTheHandshakeAreRefused) {
  // An SSLRequest followed, in the same packet, by a startup packet in the
  // clear: read after the handshake, they would pass for encrypted ones.
  std::string out, err;
  ASSERT_EQ(testing::RunCommand(
                {"/usr/bin/python3", "-c",
                 absl::StrCat("import socket, struct\n"
                              "s = socket.create_connection(('127.0.0.1', ",
                              pg_port_,
                              "))\n"
                              "s.sendall(struct.pack('!ii', 8, 80877103) + "
                              "struct.pack('!ii', 9, 196608) + b'\\0')\n"
                              "data = b''\n"
                              "while True:\n"
                              "    chunk = s.recv(4096)\n"
                              "    if not chunk: break\n"
                              "    data += chunk\n"
                              "print(data)\n")},
                &out, &err),
            0)
      << err;
  EXPECT_THAT(out, HasSubstr("unencrypted bytes after SSLRequest")) << out;
}

}  // namespace
}  // namespace fencegate
