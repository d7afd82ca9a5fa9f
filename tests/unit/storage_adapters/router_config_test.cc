// Copyright fencegate authors.
//
// Routing of resources to adapters, and configuration loading.

#include "gateway/config.h"
#include "storage_adapters/builtin.h"
#include "storage_adapters/router.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

using ::fencegate::testing::StatusIs;
using ::testing::HasSubstr;

class RouterTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_OK(RegisterBuiltinAdapters(&registry_)); }
  std::string Uri(const std::string& sub) {
    return "file://" + dir_.path() + "/" + sub;
  }
  testing::TempDir dir_;
  AdapterRegistry registry_;
};

TEST_F(RouterTest, ResolvesByFirstSegment) {
  ASSERT_OK_AND_ASSIGN(router, Router::Create(registry_, {{"files", Uri("a")},
                                                          {"b", Uri("b")}}));
  ASSERT_OK_AND_ASSIGN(r, router->Resolve("files/reports/daily.csv"));
  EXPECT_EQ(r.route, "files");
  EXPECT_EQ(r.path, "reports/daily.csv");
  ASSERT_OK_AND_ASSIGN(other, router->Resolve("b/x"));
  EXPECT_NE(other.adapter, r.adapter);
}

// A route's URI is parsed once, by the router, which hands it to whatever
// else serves the route (the PostgreSQL port) with its scheme in lower case.
TEST_F(RouterTest, KeepsEachRoutesParsedUri) {
  const std::string upper = "FILE://" + dir_.path() + "/u";
  ASSERT_OK_AND_ASSIGN(
      router, Router::Create(registry_, {{"files", Uri("a")}, {"u", upper}}));
  const fencegate::Uri* uri = router->UriOf("u");
  ASSERT_NE(uri, nullptr);
  EXPECT_EQ(uri->scheme, "file");
  EXPECT_EQ(uri->path, dir_.path() + "/u");
  EXPECT_EQ(uri->text, upper);
  EXPECT_EQ(router->UriOf("files")->path, dir_.path() + "/a");
  EXPECT_EQ(router->UriOf("nope"), nullptr);
}

TEST_F(RouterTest, UnknownOrMalformedResourceIsInvalid) {
  ASSERT_OK_AND_ASSIGN(router,
                       Router::Create(registry_, {{"files", Uri("a")}}));
  absl::StatusOr<ResolvedResource> unknown = router->Resolve("nope/x");
  EXPECT_THAT(unknown, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(unknown.status().message(), HasSubstr("unknown route \"nope\""));
  EXPECT_THAT(router->Resolve(""),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(router->Resolve("files"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(router->Resolve("/files/x"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(RouterTest, BadRoutesFailAtStartup) {
  EXPECT_THAT(Router::Create(registry_, {}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Router::Create(registry_, {{"a b", Uri("a")}}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Router::Create(registry_, {{"a", Uri("a")}, {"a", Uri("b")}}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  absl::StatusOr<std::unique_ptr<Router>> bad_scheme =
      Router::Create(registry_, {{"db", "mysql://x"}});
  EXPECT_THAT(bad_scheme, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(bad_scheme.status().message(), HasSubstr("mysql://x"));
}

TEST(ConfigTest, DefaultsAndFileValues) {
  testing::TempDir dir;
  v1::GatewayConfig config;
  config.set_data_dir(dir.path() + "/data");
  ASSERT_OK_AND_ASSIGN(options, ResolveOptions(config));
  EXPECT_EQ(options.listen_address, "127.0.0.1:7070");
  ASSERT_EQ(options.routes.size(), 1u);
  EXPECT_EQ(options.routes[0].name, "files");
  EXPECT_EQ(options.routes[0].uri, "file://" + options.data_dir + "/files");
  EXPECT_EQ(options.max_ops_per_write, 1000u);

  std::string path = dir.path() + "/fencegate.textproto";
  testing::WriteFileOrDie(
      path,
      "listen_address: \"0.0.0.0:9000\"\n"
      "insecure_allow_remote: true\n"
      "routes { name: \"r\" uri: \"file:///tmp/r\" }\n"
      "limits { max_ops_per_write: 5 max_concurrent_streams: "
      "7 memory_limit_mib: 128 max_connection_age_seconds: "
      "30 max_connection_age_grace_seconds: 5 "
      "max_connection_idle_seconds: 20 "
      "handshake_timeout_seconds: 3 max_cached_domains: 99 "
      "max_waiting_acquires: 11 max_connections: 12 }\n");
  ASSERT_OK_AND_ASSIGN(loaded, LoadConfigFile(path));
  loaded.set_data_dir(dir.path() + "/data");
  ASSERT_OK_AND_ASSIGN(from_file, ResolveOptions(loaded));
  EXPECT_EQ(from_file.listen_address, "0.0.0.0:9000");
  EXPECT_EQ(from_file.routes[0].name, "r");
  EXPECT_EQ(from_file.max_ops_per_write, 5u);
  EXPECT_EQ(from_file.max_concurrent_streams, 7u);
  EXPECT_EQ(from_file.memory_limit_bytes, uint64_t{128} << 20);
  EXPECT_EQ(from_file.max_connection_age, absl::Seconds(30));
  EXPECT_EQ(from_file.max_connection_age_grace, absl::Seconds(5));
  EXPECT_EQ(from_file.max_connection_idle, absl::Seconds(20));
  EXPECT_EQ(from_file.handshake_timeout, absl::Seconds(3));
  EXPECT_EQ(from_file.max_cached_domains, 99u);
  EXPECT_EQ(from_file.max_waiting_acquires, 11u);
  EXPECT_EQ(from_file.max_connections, 12u);
  // Defaults.
  EXPECT_EQ(options.max_concurrent_streams, 100u);
  EXPECT_EQ(options.memory_limit_bytes, uint64_t{512} << 20);
  EXPECT_EQ(options.max_cached_domains, 100000u);
  EXPECT_EQ(options.max_waiting_acquires, 1024u);
  EXPECT_EQ(options.max_connections, 1000u);
  v1::GatewayConfig tiny;
  tiny.set_data_dir(dir.path() + "/data");
  tiny.mutable_limits()->set_memory_limit_mib(8);
  EXPECT_THAT(ResolveOptions(tiny),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ConfigTest, ErrorsNameTheLine) {
  testing::TempDir dir;
  std::string path = dir.path() + "/bad.textproto";
  testing::WriteFileOrDie(path, "listen_address: \"x:1\"\nno_such_field: 3\n");
  absl::StatusOr<v1::GatewayConfig> bad = LoadConfigFile(path);
  EXPECT_THAT(bad, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(bad.status().message(), HasSubstr(":2:"));
  EXPECT_THAT(LoadConfigFile(dir.path() + "/missing"),
              StatusIs(absl::StatusCode::kNotFound));
  v1::GatewayConfig overlap;
  overlap.set_data_dir(dir.path() + "/data");
  v1::Route* route = overlap.add_routes();
  route->set_name("everything");
  route->set_uri("file://" + dir.path() + "/data");
  absl::StatusOr<GatewayOptions> exposed = ResolveOptions(overlap);
  EXPECT_THAT(exposed, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(exposed.status().message(), HasSubstr("fence store"));
  route->set_uri("file://" + dir.path() + "/data/fence/sub");
  EXPECT_THAT(ResolveOptions(overlap),
              StatusIs(absl::StatusCode::kInvalidArgument));
  route->set_uri("file://" + dir.path() + "/data/fences");  // A sibling.
  EXPECT_OK(ResolveOptions(overlap).status());
  // The scheme in any case is the file adapter's (RFC 3986): checked too.
  route->set_uri("FILE://" + dir.path() + "/data");
  EXPECT_THAT(ResolveOptions(overlap),
              StatusIs(absl::StatusCode::kInvalidArgument));

  v1::GatewayConfig huge;
  huge.set_data_dir(dir.path());
  huge.mutable_limits()->set_max_message_bytes(3000000000u);
  EXPECT_THAT(ResolveOptions(huge),
              StatusIs(absl::StatusCode::kInvalidArgument));

  v1::GatewayConfig no_port;
  no_port.set_data_dir(dir.path());
  no_port.set_listen_address("localhost");
  EXPECT_THAT(ResolveOptions(no_port),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace fencegate
