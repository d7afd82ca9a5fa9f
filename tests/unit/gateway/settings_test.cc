// Copyright fencegate authors.
//
// The gateway's settings come from one source, the configuration schema
// (config.proto, setting.proto; gateway/settings.h): every setting has its
// flag, the flags set the fields they name and override the file, the
// schema's defaults are the options' defaults, and docs/operations.md lists
// every flag with the schema's default.

#include "gateway/settings.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "fencegate/common/flag_args.h"
#include "gateway/config.h"
#include "gateway/server.h"
#include "gateway/setting_flags.h"
#include "postgres/route_options.h"
#include "storage_adapters/builtin.h"
#include "storage_adapters/router.h"
#include "tests/fixtures.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

using ::fencegate::testing::StatusIs;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using ::testing::HasSubstr;

// Parses `args` (without the program name) with every setting's flag and
// applies them to `config`.
absl::Status ParseInto(const std::vector<std::string>& args,
                       v1::GatewayConfig* config) {
  CLI::App app("settings test", "fencegate");
  SettingFlags flags(app);
  std::vector<const char*> argv = {"fencegate"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::vector<std::string> cli_args =
      FlagArgsForCli11(static_cast<int>(argv.size()), argv.data());
  try {
    app.parse(cli_args);
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(e.what());
  }
  return flags.Apply(config);
}

// The message holding `field`, or nullptr if it was never set.
const Message* Holder(const SettingField& field, const Message& config) {
  const Message* m = &config;
  for (size_t i = 0; i + 1 < field.path.size(); ++i) {
    if (!m->GetReflection()->HasField(*m, field.path[i])) return nullptr;
    m = &m->GetReflection()->GetMessage(*m, field.path[i]);
  }
  return m;
}

// The field's value as text ("" when zero), a repeated field's as
// "name=uri,...".
std::string ValueOf(const SettingField& field, const Message& config) {
  const Message* m = Holder(field, config);
  if (m == nullptr) return "";
  const FieldDescriptor* f = field.path.back();
  const google::protobuf::Reflection* r = m->GetReflection();
  if (f->is_repeated()) {
    std::string out;
    for (int i = 0; i < r->FieldSize(*m, f); ++i) {
      const Message& e = r->GetRepeatedMessage(*m, f, i);
      const google::protobuf::Descriptor* d = e.GetDescriptor();
      absl::StrAppend(
          &out, i ? "," : "",
          e.GetReflection()->GetString(e, d->FindFieldByName("name")), "=",
          e.GetReflection()->GetString(e, d->FindFieldByName("uri")));
    }
    return out;
  }
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_STRING:
      return r->GetString(*m, f);
    case FieldDescriptor::CPPTYPE_UINT32:
      return r->GetUInt32(*m, f) == 0 ? "" : absl::StrCat(r->GetUInt32(*m, f));
    case FieldDescriptor::CPPTYPE_BOOL:
      return r->GetBool(*m, f) ? "true" : "";
    default:
      return "?";
  }
}

// A value the field can take, distinct per setting: `i` is its index.
std::string SampleFor(const SettingField& field, int i) {
  const FieldDescriptor* f = field.path.back();
  if (f->is_repeated()) return absl::StrCat("r", i, "=noop://");
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_UINT32:
      return absl::StrCat(1000 + i);
    case FieldDescriptor::CPPTYPE_BOOL:
      return "true";
    default:
      return absl::StrCat("value-", i);
  }
}

TEST(SettingsTest, TheSchemaDeclaresEverySettingOnceWithAFlagAndHelp) {
  const std::vector<SettingField>& settings = GatewaySettings();
  // The configuration's fields, as of this writing; more is fine.
  EXPECT_GE(settings.size(), 34u);
  absl::flat_hash_set<std::string> flags;
  for (const SettingField& field : settings) {
    SCOPED_TRACE(field.ConfigName());
    EXPECT_FALSE(field.setting->flag().empty());
    EXPECT_FALSE(field.setting->help().empty());
    EXPECT_TRUE(flags.insert(field.setting->flag()).second)
        << "--" << field.setting->flag() << " is declared twice";
    EXPECT_NE(field.setting->flag(), "config");
    EXPECT_NE(field.setting->flag(), "port_file");
  }
  // Each default fits its field.
  v1::GatewayConfig config;
  EXPECT_OK(FillSettingDefaults(&config));
  for (const SettingField& field : settings) {
    if (field.setting->default_value().empty()) continue;
    EXPECT_EQ(ValueOf(field, config), field.setting->default_value())
        << field.ConfigName();
  }
}

TEST(SettingsTest, EveryFlagSetsItsOwnFieldAndNoOther) {
  const std::vector<SettingField>& settings = GatewaySettings();
  for (size_t i = 0; i < settings.size(); ++i) {
    const SettingField& field = settings[i];
    SCOPED_TRACE(field.ConfigName());
    const std::string sample = SampleFor(field, static_cast<int>(i));
    v1::GatewayConfig config;
    std::vector<std::string> args = {
        field.path.back()->type() == FieldDescriptor::TYPE_BOOL
            ? absl::StrCat("--", field.setting->flag())
            : absl::StrCat("--", field.setting->flag(), "=", sample)};
    ASSERT_OK(ParseInto(args, &config));
    EXPECT_EQ(ValueOf(field, config), sample);
    for (const SettingField& other : settings) {
      if (&other == &field) continue;
      EXPECT_EQ(ValueOf(other, config), "") << other.ConfigName();
    }
  }
}

TEST(SettingsTest, FlagsOverrideTheFileAndRouteReplacesItsList) {
  v1::GatewayConfig config;
  config.set_io_threads(3);
  config.set_shutdown_grace_seconds(9);
  config.mutable_etcd()->set_endpoint("etcd:2379");
  config.set_audit_log("/var/log/audit.log");
  v1::Route* a = config.add_routes();
  a->set_name("a");
  a->set_uri("noop://");
  config.add_routes()->set_name("b");
  ASSERT_OK(
      ParseInto({"--io-threads", "5", "--route=c=noop://", "--route",
                 "d=file:///tmp/d", "--etcd_lock_prefix=p/", "--io_threads=6",
                 "--insecure_allow_remote=false", "--audit-log="},
                &config));
  EXPECT_EQ(config.io_threads(), 6u);  // The last one given.
  EXPECT_EQ(config.shutdown_grace_seconds(), 9u);
  ASSERT_EQ(config.routes_size(), 2);
  EXPECT_EQ(config.routes(0).name(), "c");
  EXPECT_EQ(config.routes(1).uri(), "file:///tmp/d");
  EXPECT_EQ(config.etcd().endpoint(), "etcd:2379");
  EXPECT_EQ(config.etcd().lock_prefix(), "p/");
  EXPECT_FALSE(config.insecure_allow_remote());
  // An empty value keeps the file's.
  EXPECT_EQ(config.audit_log(), "/var/log/audit.log");
}

TEST(SettingsTest, BadValuesAreRefusedNamingTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{"--io_threads=-1"}, "--io_threads: \"-1\" is not a number"},
           {{"--max_connections=4294967296"}, "--max_connections: \""},
           {{"--tls_refresh_seconds="}, "--tls_refresh_seconds"},
           {{"--log_writes=maybe"}, "--log_writes: \"maybe\" is not true"},
           {{"--route=files"}, "--route: a route is NAME=URI"},
           {{"--route==postgres://u:pw@h/db"}, "--route: a route is NAME=URI"},
           {{"--no_such_flag=1"}, "no_such_flag"},
           {{"--listen"}, "listen"},
       }) {
    v1::GatewayConfig config;
    absl::Status s = ParseInto(c.args, &config);
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument)) << c.args[0];
    EXPECT_THAT(s.message(), HasSubstr(c.message)) << c.args[0];
    EXPECT_THAT(s.message(), ::testing::Not(HasSubstr("pw"))) << c.args[0];
  }
}

// ResolveOptions, the one builder of GatewayOptions, fills every setting
// the configuration leaves out with the schema's default (FillSettingDefaults
// reads them from config.proto): no other default exists to drift.
TEST(SettingsTest, ResolveOptionsAppliesTheSchemasDefaults) {
  testing::TempDir dir;
  v1::GatewayConfig config;
  config.set_data_dir(dir.path() + "/data");
  ASSERT_OK_AND_ASSIGN(resolved, ResolveOptions(config));
  v1::GatewayConfig schema;
  ASSERT_OK(FillSettingDefaults(&schema));
  const v1::Limits& limits = schema.limits();
  EXPECT_EQ(resolved.listen_address, schema.listen_address());
  EXPECT_EQ(resolved.max_message_bytes, limits.max_message_bytes());
  EXPECT_EQ(resolved.max_ops_per_write, limits.max_ops_per_write());
  EXPECT_EQ(resolved.max_connections, limits.max_connections());
  EXPECT_EQ(resolved.max_concurrent_streams, limits.max_concurrent_streams());
  EXPECT_EQ(resolved.memory_limit_bytes,
            uint64_t{limits.memory_limit_mib()} << 20);
  EXPECT_EQ(resolved.max_connection_age,
            absl::Seconds(limits.max_connection_age_seconds()));
  EXPECT_EQ(resolved.max_connection_age_grace,
            absl::Seconds(limits.max_connection_age_grace_seconds()));
  EXPECT_EQ(resolved.max_connection_idle,
            absl::Seconds(limits.max_connection_idle_seconds()));
  EXPECT_EQ(resolved.handshake_timeout,
            absl::Seconds(limits.handshake_timeout_seconds()));
  EXPECT_EQ(resolved.max_cached_domains, limits.max_cached_domains());
  EXPECT_EQ(resolved.max_waiting_acquires, limits.max_waiting_acquires());
  EXPECT_EQ(resolved.shutdown_grace,
            absl::Seconds(schema.shutdown_grace_seconds()));
  EXPECT_EQ(resolved.log_writes, schema.log_writes());
  EXPECT_EQ(resolved.log_format, schema.log_format() == "json"
                                     ? LogFormat::kJson
                                     : LogFormat::kText);
  EXPECT_EQ(resolved.metrics_listen, schema.metrics_listen());
  EXPECT_EQ(resolved.tls.refresh,
            absl::Seconds(schema.tls().refresh_seconds()));
  EXPECT_EQ(resolved.insecure_allow_remote, schema.insecure_allow_remote());
  EXPECT_EQ(resolved.pg_max_connections, schema.pg().max_connections());
  EXPECT_EQ(resolved.pg_idle_transaction_timeout,
            absl::Milliseconds(schema.pg().idle_transaction_timeout_ms()));
  // io_threads' default (0) is computed here: max(4, 2 x cores).
  EXPECT_EQ(schema.io_threads(), 0u);
  EXPECT_GE(resolved.io_threads, 4u);
  // queue_threads' default (0) too: a quarter of the cores, at least one.
  EXPECT_EQ(schema.queue_threads(), 0u);
  EXPECT_EQ(resolved.queue_threads,
            std::max(1u, std::thread::hardware_concurrency() / 4));
  // Options left as constructed are refused, not served with zeros.
  TokenWatcherRegistry watchers;
  AdapterRegistry adapters;
  EXPECT_THAT(GatewayServer::Start(GatewayOptions{}, adapters, watchers),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// The rows of docs/operations.md's flag table: "| `--a=X`, `--b` | default |
// meaning |".
struct DocRow {
  std::vector<std::string> flags;
  std::string default_text;
};

std::vector<DocRow> DocumentedFlags() {
  std::ifstream in(std::string(FENCEGATE_SOURCE_DIR) + "/docs/operations.md");
  std::vector<DocRow> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, "| `--")) continue;
    std::vector<std::string> cells = absl::StrSplit(line, " | ");
    if (cells.size() < 3) continue;
    DocRow row;
    for (absl::string_view part : absl::StrSplit(cells[0], '`')) {
      if (!absl::ConsumePrefix(&part, "--")) continue;
      row.flags.emplace_back(part.substr(0, part.find('=')));
    }
    row.default_text = absl::StrReplaceAll(cells[1], {{"`", ""}});
    rows.push_back(std::move(row));
  }
  return rows;
}

TEST(SettingsTest, OperationsMdListsEveryFlagWithTheSchemasDefault) {
  const std::vector<DocRow> rows = DocumentedFlags();
  ASSERT_FALSE(rows.empty()) << "no flag table in docs/operations.md";
  absl::flat_hash_set<std::string> known = {"config", "port_file"};
  for (const SettingField& field : GatewaySettings()) {
    const std::string& flag = field.setting->flag();
    known.insert(flag);
    const DocRow* found = nullptr;
    for (const DocRow& row : rows) {
      for (const std::string& f : row.flags) {
        if (f == flag) found = &row;
      }
    }
    if (found == nullptr) {
      ADD_FAILURE() << "docs/operations.md has no row for --" << flag << " ("
                    << field.ConfigName() << ")";
      continue;
    }
    EXPECT_EQ(found->default_text, field.DefaultText())
        << "--" << flag << ": docs/operations.md and config.proto disagree";
  }
  for (const DocRow& row : rows) {
    for (const std::string& f : row.flags) {
      EXPECT_TRUE(known.contains(f))
          << "docs/operations.md lists --" << f << ", which is no flag";
    }
  }
}

// The rows of docs/postgres.md's table of route settings: "| `name` |
// default | meaning |".
std::vector<DocRow> DocumentedRouteSettings() {
  std::ifstream in(std::string(FENCEGATE_SOURCE_DIR) + "/docs/postgres.md");
  std::vector<DocRow> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, "| `")) continue;
    std::vector<std::string> cells = absl::StrSplit(line, " | ");
    if (cells.size() < 3) continue;
    rows.push_back({{absl::StrReplaceAll(cells[0].substr(2), {{"`", ""}})},
                    absl::StrReplaceAll(cells[1], {{"`", ""}})});
  }
  return rows;
}

TEST(SettingsTest, PostgresMdListsEveryRouteSettingWithTheSchemasDefault) {
  const std::vector<DocRow> rows = DocumentedRouteSettings();
  const google::protobuf::Descriptor* d = v1::PostgresRoute::descriptor();
  ASSERT_GT(d->field_count(), 0);
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    SCOPED_TRACE(f->name());
    ASSERT_TRUE(f->options().HasExtension(v1::setting));
    const v1::Setting& setting = f->options().GetExtension(v1::setting);
    EXPECT_FALSE(setting.help().empty());
    EXPECT_TRUE(setting.flag().empty()) << "route settings have no flags";
    const DocRow* found = nullptr;
    for (const DocRow& row : rows) {
      if (row.flags[0] == f->name()) found = &row;
    }
    if (found == nullptr) {
      ADD_FAILURE() << "docs/postgres.md has no row for " << f->name();
      continue;
    }
    EXPECT_EQ(found->default_text, setting.default_value());
  }
}

absl::StatusOr<postgres::RouteOptions> ParsePostgres(
    const std::string& text, const v1::PostgresRoute* typed = nullptr) {
  absl::StatusOr<Uri> uri = ParseUri(text);
  if (!uri.ok()) return uri.status();
  return postgres::ParseRouteUri(*uri, typed);
}

// ParseRouteUri, the one builder of a route's options, takes each setting
// a URI leaves out from the schema: ParseRouteSettings fills every field
// with its `setting` default_value (config.proto), and the options carry
// those values.
TEST(PostgresRouteSettingsTest, ParseRouteUriAppliesTheSchemasDefaults) {
  ASSERT_OK_AND_ASSIGN(uri, ParseUri("postgres://u@h/db"));
  std::vector<std::string> libpq;
  ASSERT_OK_AND_ASSIGN(settings,
                       postgres::ParseRouteSettings(uri, nullptr, &libpq));
  const google::protobuf::Descriptor* d = v1::PostgresRoute::descriptor();
  const google::protobuf::Reflection* r = settings.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    const std::string& want =
        f->options().GetExtension(v1::setting).default_value();
    if (want.empty() || f->is_repeated()) continue;
    SCOPED_TRACE(f->name());
    std::string got;
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_UINT32:
        got = absl::StrCat(r->GetUInt32(settings, f));
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        got = r->GetBool(settings, f) ? "true" : "false";
        break;
      case FieldDescriptor::CPPTYPE_STRING:
        got = r->GetString(settings, f);
        break;
      default:
        ADD_FAILURE() << "a setting of a type this test does not read";
    }
    EXPECT_EQ(got, want);
  }
  ASSERT_OK_AND_ASSIGN(parsed, ParsePostgres("postgres://u@h/db"));
  EXPECT_EQ(parsed.pool_size, static_cast<int>(settings.pool_size()));
  EXPECT_EQ(parsed.pool_wait_ms, settings.pool_wait_ms());
  EXPECT_EQ(parsed.spread_after_ms, settings.spread_after_ms());
  EXPECT_EQ(parsed.statement_timeout_ms, settings.statement_timeout_ms());
  EXPECT_EQ(parsed.fence_schema, settings.fence_schema());
  EXPECT_EQ(parsed.max_result_rows, settings.max_result_rows());
  EXPECT_EQ(parsed.max_result_bytes, settings.max_result_bytes());
  EXPECT_EQ(parsed.max_sql_bytes, settings.max_sql_bytes());
  EXPECT_EQ(parsed.max_connections_per_caller,
            settings.max_connections_per_caller());
  EXPECT_EQ(parsed.allow_privileged_role, settings.allow_privileged_role());
  EXPECT_EQ(parsed.allow_dirty_statements, settings.allow_dirty_statements());
  EXPECT_EQ(parsed.search_path,
            std::vector<std::string>(settings.search_path().begin(),
                                     settings.search_path().end()));
  EXPECT_EQ(parsed.search_path, (std::vector<std::string>{"$user", "public"}));
}

TEST(PostgresRouteSettingsTest, TypedSettingsAndTheUriShorthandMerge) {
  v1::PostgresRoute typed;
  typed.set_pool_size(3);
  typed.set_spread_after_ms(0);  // Present: 0, not the default 5.
  typed.add_search_path("billing");
  ASSERT_OK_AND_ASSIGN(
      merged, ParsePostgres("postgres://u:pw@h/db?statement_timeout_ms=100&"
                            "pool_size=3&sslmode=disable",
                            &typed));
  EXPECT_EQ(merged.pool_size, 3);
  EXPECT_EQ(merged.spread_after_ms, 0);
  EXPECT_EQ(merged.statement_timeout_ms, 100);
  EXPECT_EQ(merged.search_path, std::vector<std::string>{"billing"});
  EXPECT_THAT(merged.conninfo, HasSubstr("sslmode=disable"));
  EXPECT_THAT(merged.conninfo, ::testing::Not(HasSubstr("pool_size")));

  // The same setting both ways, with different values.
  absl::StatusOr<postgres::RouteOptions> clash =
      ParsePostgres("postgres://u:pw@h/db?pool_size=4", &typed);
  EXPECT_THAT(clash, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(clash.status().message(), HasSubstr("pool_size is given both"));
  EXPECT_THAT(clash.status().message(), ::testing::Not(HasSubstr("pw")));
  // Given twice in the URI, the last one holds.
  ASSERT_OK_AND_ASSIGN(
      twice, ParsePostgres("postgres://u@h/db?pool_size=4&pool_size=6"));
  EXPECT_EQ(twice.pool_size, 6);
  // A typed value outside its bounds.
  v1::PostgresRoute zero;
  zero.set_pool_size(0);
  absl::StatusOr<postgres::RouteOptions> none =
      ParsePostgres("postgres://u@h/db", &zero);
  EXPECT_THAT(none, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(none.status().message(),
              HasSubstr("pool_size: 0 is not a number from 1 to 1024"));
  // The shorthand's values are checked against the same bounds.
  EXPECT_THAT(ParsePostgres("postgres://u@h/db?max_result_bytes=1073741825"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_OK(
      ParsePostgres("postgres://u@h/db?max_result_bytes=1073741824").status());
}

TEST(PostgresRouteSettingsTest,
     TheConfigFilesSettingsReachTheRouteOfTheirKind) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/fencegate.textproto";
  testing::WriteFileOrDie(
      path, "data_dir: \"" + dir.path() +
                "/data\"\n"
                "routes { name: \"db\" uri: \"postgres://u@127.0.0.1:1/db\"\n"
                "  postgres { pool_size: 2 search_path: [\"a\", \"b\"] } }\n"
                "routes { name: \"files\" uri: \"file://" +
                dir.path() + "/files\" }\n");
  ASSERT_OK_AND_ASSIGN(config, LoadConfigFile(path));
  ASSERT_OK_AND_ASSIGN(options, ResolveOptions(config));
  ASSERT_EQ(options.routes.size(), 2u);
  ASSERT_NE(options.routes[0].settings, nullptr);
  const auto& db =
      static_cast<const v1::PostgresRoute&>(*options.routes[0].settings);
  EXPECT_EQ(db.pool_size(), 2u);
  EXPECT_EQ(db.search_path_size(), 2);
  EXPECT_EQ(options.routes[1].settings, nullptr);
  AdapterRegistry registry;
  ASSERT_OK(RegisterBuiltinAdapters(&registry));
  // The PostgreSQL route is built (it connects only when written to).
  EXPECT_OK(Router::Create(registry, options.routes).status());

  // PostgreSQL settings on a file route are refused.
  options.routes[1].settings = options.routes[0].settings;
  absl::StatusOr<std::unique_ptr<Router>> mixed =
      Router::Create(registry, options.routes);
  EXPECT_THAT(mixed, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(mixed.status().message(),
              HasSubstr("fencegate.v1.PostgresRoute are not for file://"));
}

}  // namespace
}  // namespace fencegate
