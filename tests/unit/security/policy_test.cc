// Copyright fencegate authors.
//
// The access policy (security/policy.h), the safe listening default, and
// named statements on routes: the trust rules that need no running gateway.

#include "security/policy.h"

#include <string>

#include "gateway/config.h"
#include "google/protobuf/text_format.h"
#include "storage_adapters/builtin.h"
#include "storage_adapters/router.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

using ::fencegate::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;
using Rule = v1::Policy::Rule;

constexpr char kPolicy[] = R"pb(
  rule {
    identities: "spiffe://example.org/billing-worker"
    domain_prefixes: "billing/"
    resource_prefixes: "db/"
    permissions: WRITE
    permissions: LEASE
  }
  rule {
    identities: "spiffe://example.org/reporter-*"
    domain_prefixes: "reports/"
    resource_prefixes: "files/reports/"
    permissions: WRITE
  }
  rule {
    identities: "spiffe://example.org/jobs"
    domain_prefixes: "jobs/"
    resource_prefixes: "db/"
    permissions: WRITE
    sql_statements: "complete_job"
  }
  rule {
    identities: "ops.example.org"
    domain_prefixes: ""
    permissions: GET_FENCE
    permissions: FENCE
  }
  rule { identities: "admin" domain_prefixes: "billing/" permissions: ADMIN }
  domain { prefix: "billing/" token_source: LEASE }
  domain { prefix: "billing/etcd/" token_source: ETCD }
  domain { prefix: "jobs/" max_advance: 1000 }
)pb";

PolicyEnvironment Env() {
  PolicyEnvironment env;
  env.watched = {"etcd", "zookeeper"};
  env.statement_names = {"complete_job", "other_job"};
  return env;
}

absl::StatusOr<std::shared_ptr<const Policy>> Parse(const std::string& text,
                                                    PolicyEnvironment env) {
  v1::Policy proto;
  if (!google::protobuf::TextFormat::ParseFromString(text, &proto)) {
    return absl::InvalidArgumentError("does not parse");
  }
  return Policy::Create(std::move(proto), env);
}

PolicyRequest Request(absl::string_view identity, Permission permission,
                      absl::string_view domain,
                      absl::string_view resource = "") {
  PolicyRequest r;
  r.identity = identity;
  r.permission = permission;
  r.domain = domain;
  r.resource = resource;
  r.ad_hoc = permission == Rule::WRITE;
  return r;
}

class PolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::shared_ptr<const Policy>> policy =
        Parse(kPolicy, Env());
    ASSERT_TRUE(policy.ok()) << policy.status();
    policy_ = *std::move(policy);
  }
  absl::Status Authorize(const PolicyRequest& r) {
    return policy_->Authorize(r);
  }
  std::shared_ptr<const Policy> policy_;
};

TEST_F(PolicyTest, EachPermissionAndPrefixAllowsAndRefusesAsWritten) {
  const char* billing = "spiffe://example.org/billing-worker";
  EXPECT_OK(Authorize(Request(billing, Rule::WRITE, "billing/june", "db/x")));
  EXPECT_OK(Authorize(Request(billing, Rule::LEASE, "billing/june")));
  // Another resource, another domain, a permission it lacks.
  EXPECT_THAT(
      Authorize(Request(billing, Rule::WRITE, "billing/june", "files/x")),
      StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(Authorize(Request(billing, Rule::WRITE, "jobs/1", "db/x")),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(Authorize(Request(billing, Rule::FENCE, "billing/june")),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(Authorize(Request(billing, Rule::GET_FENCE, "billing/june")),
              StatusIs(absl::StatusCode::kPermissionDenied));
  // An identity is exact unless it ends in '*'.
  EXPECT_THAT(Authorize(Request("spiffe://example.org/billing-worker2",
                                Rule::WRITE, "billing/june", "db/x")),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_OK(Authorize(Request("spiffe://example.org/reporter-eu", Rule::WRITE,
                              "reports/daily", "files/reports/daily.csv")));
  EXPECT_THAT(Authorize(Request("spiffe://example.org/reporte", Rule::WRITE,
                                "reports/daily", "files/reports/daily.csv")),
              StatusIs(absl::StatusCode::kPermissionDenied));
  // "" matches every domain.
  EXPECT_OK(Authorize(Request("ops.example.org", Rule::GET_FENCE, "any/x")));
  EXPECT_OK(Authorize(Request("ops.example.org", Rule::FENCE, "jobs/1")));
  EXPECT_THAT(Authorize(Request("ops.example.org", Rule::ADMIN, "billing/x")),
              StatusIs(absl::StatusCode::kPermissionDenied));
  // ADMIN grants Fence too; FENCE does not grant ADMIN.
  EXPECT_OK(Authorize(Request("admin", Rule::ADMIN, "billing/x")));
  EXPECT_OK(Authorize(Request("admin", Rule::FENCE, "billing/x")));
  // Nobody else.
  EXPECT_THAT(Authorize(Request("", Rule::GET_FENCE, "any")),
              StatusIs(absl::StatusCode::kPermissionDenied));
}

TEST_F(PolicyTest, DenialNamesTheRequestNotTheRules) {
  absl::Status denied =
      Authorize(Request("spiffe://example.org/billing-worker", Rule::WRITE,
                        "billing/june", "files/secret"));
  ASSERT_THAT(denied, StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(denied.message(),
              HasSubstr("\"spiffe://example.org/billing-worker\""));
  EXPECT_THAT(denied.message(), HasSubstr("WRITE"));
  EXPECT_THAT(denied.message(), HasSubstr("billing/june"));
  EXPECT_THAT(denied.message(), HasSubstr("files/secret"));
  EXPECT_THAT(denied.message(), Not(HasSubstr("db/")));
  EXPECT_THAT(denied.message(), Not(HasSubstr("reporter")));
}

TEST_F(PolicyTest, NamedStatementOnlyIdentities) {
  PolicyRequest named =
      Request("spiffe://example.org/jobs", Rule::WRITE, "jobs/7", "db/jobs");
  named.ad_hoc = false;
  named.statements = {"complete_job", "complete_job"};
  EXPECT_OK(Authorize(named));
  named.statements = {"complete_job", "other_job"};
  EXPECT_THAT(Authorize(named), StatusIs(absl::StatusCode::kPermissionDenied));
  // SQL text (or a file operation) beside a named statement.
  named.statements = {"complete_job"};
  named.ad_hoc = true;
  EXPECT_THAT(Authorize(named), StatusIs(absl::StatusCode::kPermissionDenied));
  // A rule without sql_statements allows SQL text, as before.
  PolicyRequest text = Request("spiffe://example.org/billing-worker",
                               Rule::WRITE, "billing/june", "db/x");
  EXPECT_TRUE(text.ad_hoc);
  EXPECT_OK(Authorize(text));
}

TEST_F(PolicyTest, LongestDomainPrefixBinds) {
  EXPECT_EQ(policy_->BindingOf("billing/june").source,
            v1::Policy::Domain::LEASE);
  EXPECT_EQ(policy_->BindingOf("billing/etcd/x").source,
            v1::Policy::Domain::ETCD);
  EXPECT_EQ(policy_->BindingOf("jobs/1").source, v1::Policy::Domain::ANY);
  EXPECT_EQ(policy_->BindingOf("jobs/1").max_advance, 1000u);
  EXPECT_EQ(policy_->BindingOf("other").source, v1::Policy::Domain::ANY);
  EXPECT_EQ(policy_->BindingOf("other").max_advance, 0u);
}

TEST(PolicyLoadTest, BadPoliciesAreRefusedWithTheReason) {
  struct Case {
    const char* text;
    const char* reason;
  };
  for (const Case& c : {
           Case{R"pb(rule { identities: "a" permissions: GET_FENCE })pb",
                "domain_prefixes"},
           Case{R"pb(rule {
                       identities: "a"
                       domain_prefixes: ""
                       permissions: WRITE
                     })pb",
                "resource_prefixes"},
           Case{R"pb(rule { domain_prefixes: "" permissions: GET_FENCE })pb",
                "identities"},
           Case{R"pb(rule {
                       identities: "a*b"
                       domain_prefixes: ""
                       permissions: LEASE
                     })pb",
                "'*'"},
           Case{R"pb(rule { identities: "a" domain_prefixes: "" })pb",
                "permissions"},
           Case{R"pb(rule {
                       identities: "a"
                       domain_prefixes: ""
                       resource_prefixes: ""
                       permissions: WRITE
                       sql_statements: "nope"
                     })pb",
                "nope"},
           Case{R"pb(domain { prefix: "x" }
                     domain { prefix: "x" })pb",
                "twice"},
       }) {
    SCOPED_TRACE(c.text);
    absl::StatusOr<std::shared_ptr<const Policy>> policy = Parse(c.text, Env());
    EXPECT_THAT(policy, StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(policy.status().message(), HasSubstr(c.reason));
  }
  PolicyEnvironment no_etcd = Env();
  no_etcd.watched = {"zookeeper"};
  absl::StatusOr<std::shared_ptr<const Policy>> etcd =
      Parse(R"pb(domain { prefix: "e/" token_source: ETCD })pb", no_etcd);
  EXPECT_THAT(etcd, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(etcd.status().message(), HasSubstr("etcd_endpoint"));
  EXPECT_OK(
      Parse(R"pb(domain { prefix: "z/" token_source: ZOOKEEPER })pb", no_etcd)
          .status());
  PolicyEnvironment no_zookeeper = Env();
  no_zookeeper.watched = {"etcd"};
  absl::StatusOr<std::shared_ptr<const Policy>> zookeeper = Parse(
      R"pb(domain { prefix: "z/" token_source: ZOOKEEPER })pb", no_zookeeper);
  EXPECT_THAT(zookeeper, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(zookeeper.status().message(), HasSubstr("zookeeper_endpoint"));

  testing::TempDir dir;
  const std::string path = dir.path() + "/policy.textproto";
  testing::WriteFileOrDie(path, "rule {\n  identities: \"a\"\n  bogus: 1\n}\n");
  absl::StatusOr<std::shared_ptr<const Policy>> file =
      Policy::Load(path, Env());
  EXPECT_THAT(file, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(file.status().message(), HasSubstr(":3:"));
}

TEST(ListenTest, NonLoopbackNeedsMtlsAndAPolicy) {
  for (const char* local : {"127.0.0.1:1", "127.1.2.3:1", "localhost:7070",
                            "[::1]:7070", "unix:/tmp/s"}) {
    EXPECT_TRUE(IsLoopbackAddress(local)) << local;
  }
  for (const char* remote : {"0.0.0.0:7070", "10.0.0.1:1", "[::]:7070",
                             "127.0.0.1.example.org:1", "example.org:1"}) {
    EXPECT_FALSE(IsLoopbackAddress(remote)) << remote;
  }
  testing::TempDir dir;
  v1::GatewayConfig config;
  config.set_data_dir(dir.path() + "/data");
  config.set_listen_address("0.0.0.0:7070");
  absl::StatusOr<GatewayOptions> refused = ResolveOptions(config);
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(refused.status().message(), HasSubstr("insecure_allow_remote"));
  // TLS alone is not enough: nobody is authorized.
  config.mutable_tls()->set_cert("c.pem");
  config.mutable_tls()->set_key("k.pem");
  config.mutable_tls()->set_client_ca("ca.pem");
  EXPECT_THAT(ResolveOptions(config),
              StatusIs(absl::StatusCode::kInvalidArgument));
  config.set_policy("policy.textproto");
  EXPECT_OK(ResolveOptions(config).status());
  // A policy without client certificates has no identities to grant.
  config.mutable_tls()->clear_client_ca();
  absl::StatusOr<GatewayOptions> no_mtls = ResolveOptions(config);
  EXPECT_THAT(no_mtls, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(no_mtls.status().message(), HasSubstr("mTLS"));
  v1::GatewayConfig insecure;
  insecure.set_data_dir(dir.path() + "/data");
  insecure.set_listen_address("0.0.0.0:7070");
  insecure.set_insecure_allow_remote(true);
  EXPECT_OK(ResolveOptions(insecure).status());
}

class StatementTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_OK(RegisterBuiltinAdapters(&registry_)); }
  AdapterRegistry registry_;
  testing::TempDir dir_;
};

TEST_F(StatementTest, NamedStatementsAreDeclaredCheckedAndExpanded) {
  const std::string pg = "postgres://u@127.0.0.1:1/db";
  RouteSpec db{"db", pg, {{"complete_job", "UPDATE jobs SET done = $1"}}};
  ASSERT_OK_AND_ASSIGN(router, Router::Create(registry_, {db}));
  ASSERT_OK_AND_ASSIGN(resolved, router->Resolve("db/jobs"));
  google::protobuf::RepeatedPtrField<v1::Operation> ops;
  v1::SqlStatement* named = ops.Add()->mutable_sql();
  named->set_statement("complete_job");
  named->add_params()->set_boolean(true);
  ASSERT_OK(Router::ExpandStatements(resolved, &ops));
  EXPECT_EQ(ops[0].sql().sql(), "UPDATE jobs SET done = $1");
  EXPECT_EQ(ops[0].sql().params_size(), 1);

  named->clear_sql();
  named->set_statement("drop_everything");
  absl::Status unknown = Router::ExpandStatements(resolved, &ops);
  EXPECT_THAT(unknown, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(unknown.message(), HasSubstr("drop_everything"));
  named->set_sql("DELETE FROM jobs");  // Both.
  EXPECT_THAT(Router::ExpandStatements(resolved, &ops),
              StatusIs(absl::StatusCode::kInvalidArgument));

  // Declarations the adapter refuses fail at start-up.
  for (const RouteSpec& bad :
       {RouteSpec{"db", pg, {{"x", std::string("DELETE FROM t\0", 14)}}},
        RouteSpec{"db", pg, {{"x", "COMMIT"}}},
        RouteSpec{"db", pg, {{"bad name", "SELECT 1"}}},
        RouteSpec{"db", pg, {{"x", "SELECT 1"}, {"x", "SELECT 2"}}},
        RouteSpec{"files", "file://" + dir_.path(), {{"x", "SELECT 1"}}}}) {
    SCOPED_TRACE(bad.name);
    EXPECT_THAT(Router::Create(registry_, {bad}),
                StatusIs(absl::StatusCode::kInvalidArgument));
  }
}

}  // namespace
}  // namespace fencegate
