// Copyright fencegate authors.
//
// Named SQL statements end to end (docs/security.md, rule 14): a PostgreSQL
// route declares statements in the configuration file; an identity whose
// rule lists sql_statements may call those by name and nothing else, while
// an identity whose rule does not may still send SQL text.

#include <memory>
#include <string>

#include "pqxx/pqxx"
#include "tests/postgres_server.h"
#include "tests/trust_fixture.h"

namespace fencegate {
namespace {

using ::fencegate::testing::CertFiles;
using ::fencegate::testing::PostgresServer;
using ::fencegate::testing::RunCommand;
using ::fencegate::testing::WriteFileOrDie;
using ::testing::HasSubstr;

class NamedStatementTest : public testing::TrustFixture {
 protected:
  std::string Policy() const override {
    return TrustFixture::Policy() + R"pb(
      rule {
        identities: "jobs-worker"
        domain_prefixes: "jobs/"
        resource_prefixes: "db/"
        permissions: WRITE
        sql_statements: "complete_job"
      }
      rule {
        identities: "dba"
        domain_prefixes: "jobs/"
        resource_prefixes: "db/"
        permissions: WRITE
      }
    )pb";
  }

  void SetUp() override {
    TrustFixture::SetUp();
    if (HasFatalFailure()) return;
    auto server = PostgresServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    pg_ = *std::move(server);
    Exec("CREATE TABLE jobs (id bigint PRIMARY KEY, done boolean)");
    Exec("INSERT INTO jobs VALUES (1, false), (2, false)");
    ASSERT_OK_AND_ASSIGN(jobs, pki_->Issue("jobs", "jobs-worker", ""));
    ASSERT_OK_AND_ASSIGN(dba, pki_->Issue("dba", "dba", ""));
    jobs_ = jobs;
    dba_ = dba;
    const std::string config = dir_.path() + "/fencegate.textproto";
    WriteFileOrDie(
        config,
        absl::StrCat("routes { name: \"db\" uri: \"", pg_->Uri(), "\"\n",
                     "  statements { name: \"complete_job\" sql: \"UPDATE "
                     "jobs SET done = true WHERE id = $1::bigint\" }\n",
                     "  statements { name: \"reset_job\" sql: \"UPDATE jobs "
                     "SET done = false WHERE id = $1::bigint\" }\n}\n"));
    StartGateway({"--config=" + config});
  }

  pqxx::result Exec(const std::string& sql) {
    pqxx::connection c(pg_->Conninfo());
    pqxx::work tx(c);
    pqxx::result r = tx.exec(sql);
    tx.commit();
    return r;
  }
  std::string Done() {
    pqxx::result r = Exec(
        "SELECT string_agg(done::text, ',' ORDER BY id) "
        "FROM jobs");
    return r[0][0].c_str();
  }

  grpc::Status Run(const CertFiles& who, uint64_t token,
                   const v1::SqlStatement& statement) {
    v1::WriteRequest request;
    request.set_domain("jobs/1");
    request.set_token(token);
    request.set_resource("db/jobs");
    *request.add_ops()->mutable_sql() = statement;
    v1::WriteResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    return v1::Gateway::NewStub(Channel(who))
        ->Write(&context, request, &response);
  }
  static v1::SqlStatement Named(const std::string& name, int64_t id) {
    v1::SqlStatement s;
    s.set_statement(name);
    s.add_params()->set_int64(id);
    return s;
  }
  static v1::SqlStatement Text(const std::string& sql) {
    v1::SqlStatement s;
    s.set_sql(sql);
    return s;
  }

  std::unique_ptr<PostgresServer> pg_;
  CertFiles jobs_, dba_;
};

TEST_F(NamedStatementTest,
       AStatementOnlyIdentityRunsItsStatementsAndNothingElse) {
  ASSERT_TRUE(Run(jobs_, 1, Named("complete_job", 1)).ok());
  EXPECT_EQ(Done(), "true,false");
  // SQL text, a statement not in its rule, an undeclared name: refused
  // before anything runs.
  grpc::Status text = Run(jobs_, 1, Text("UPDATE jobs SET done = true"));
  EXPECT_EQ(text.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(text.error_message(), HasSubstr("SQL text"));
  EXPECT_EQ(Run(jobs_, 1, Named("reset_job", 1)).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Run(jobs_, 1, Named("drop_jobs", 1)).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Done(), "true,false");

  // A rule without sql_statements: SQL text and any declared statement.
  ASSERT_TRUE(
      Run(dba_, 2, Text("UPDATE jobs SET done = true WHERE id = 2")).ok());
  EXPECT_EQ(Done(), "true,true");
  ASSERT_TRUE(Run(dba_, 2, Named("reset_job", 1)).ok());
  EXPECT_EQ(Done(), "false,true");
  grpc::Status unknown = Run(dba_, 2, Named("drop_jobs", 1));
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(unknown.error_message(), HasSubstr("drop_jobs"));
}

TEST_F(NamedStatementTest, FencectlCallsAStatementByName) {
  const std::vector<std::string> argv = {FENCECTL_BIN,
                                         "--addr=" + gateway_->address(),
                                         "--tls_ca=" + pki_->ca(),
                                         "--tls_cert=" + jobs_.cert,
                                         "--tls_key=" + jobs_.key,
                                         "write",
                                         "--domain=jobs/2",
                                         "--token=4",
                                         "--resource=db/jobs",
                                         "--statement=complete_job",
                                         "--param=int64:2"};
  std::string out, err;
  EXPECT_EQ(RunCommand(argv, &out, &err), 0) << err;
  EXPECT_THAT(out, HasSubstr("rows_affected=1"));
  EXPECT_EQ(Done(), "false,true");
}

}  // namespace
}  // namespace fencegate
