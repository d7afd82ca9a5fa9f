// Copyright fencegate authors.

#include "postgres/route_options.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "fencegate/common/setting_value.h"
#include "postgres/fence_schema.h"

namespace fencegate::postgres {
namespace {

using google::protobuf::FieldDescriptor;

// Whether `a` and `b` hold the same value of `field`.
bool SameField(const v1::PostgresRoute& a, const v1::PostgresRoute& b,
               const FieldDescriptor* field) {
  v1::PostgresRoute only_a;
  v1::PostgresRoute only_b;
  only_a.CopyFrom(a);
  only_b.CopyFrom(b);
  const google::protobuf::Descriptor* d = v1::PostgresRoute::descriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    if (d->field(i) == field) continue;
    only_a.GetReflection()->ClearField(&only_a, d->field(i));
    only_b.GetReflection()->ClearField(&only_b, d->field(i));
  }
  return only_a.SerializeAsString() == only_b.SerializeAsString();
}

}  // namespace

absl::StatusOr<v1::PostgresRoute> ParseRouteSettings(
    const Uri& uri, const v1::PostgresRoute* typed,
    std::vector<std::string>* libpq_params) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("adapter URI \"", uri.redacted, "\": ", why));
  };
  v1::PostgresRoute settings;
  if (typed != nullptr) settings = *typed;
  if (absl::Status s = CheckFieldBounds(settings); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("postgres settings: ", s.message()));
  }
  // The query's settings: the shorthand of the typed message.
  v1::PostgresRoute from_uri;
  std::vector<const FieldDescriptor*> given;
  if (!uri.query.empty()) {
    for (absl::string_view pair : absl::StrSplit(uri.query, '&')) {
      if (pair.empty()) continue;
      std::pair<absl::string_view, absl::string_view> kv =
          absl::StrSplit(pair, absl::MaxSplits('=', 1));
      if (const FieldDescriptor* f =
              v1::PostgresRoute::descriptor()->FindFieldByName(
                  std::string(kv.first))) {
        if (absl::Status s =
                SetFieldFromText(&from_uri, f, kv.second, kv.first);
            !s.ok()) {
          return bad(s.message());
        }
        if (std::find(given.begin(), given.end(), f) == given.end()) {
          given.push_back(f);  // Given twice, the last one holds.
        }
      } else if (kv.first == "fence_table") {
        return bad(
            "fence_table is gone; the fence table is now "
            "<fence_schema>.fences, created by `fencectl pg-setup` "
            "(docs/postgres.md)");
      } else if (kv.first == "client_encoding") {
        return bad(
            "client_encoding is not accepted: the gateway speaks UTF8 to "
            "PostgreSQL (its SQL classifier reads text as UTF-8)");
      } else if (kv.first == "options") {
        return bad(
            "options is not accepted: session settings given at "
            "connection would apply to every Write (the route role may hold "
            "no settings of its own either; docs/postgres.md)");
      } else {
        libpq_params->emplace_back(pair);
      }
    }
  }
  for (const FieldDescriptor* f : given) {
    if (!IsUnsetField(settings, f)) {
      if (!SameField(settings, from_uri, f)) {
        return bad(absl::StrCat(
            f->name(),
            " is given both in the URI and in the route's postgres "
            "settings, with different values"));
      }
      continue;
    }
    settings.GetReflection()->SwapFields(&settings, &from_uri, {f});
  }
  if (absl::Status s = FillFieldDefaults(&settings); !s.ok()) return s;
  if (!postgres::IsPlainIdentifier(settings.fence_schema())) {
    return bad(absl::StrCat("fence_schema=", settings.fence_schema(),
                            " must be 1-63 lower-case letters, digits and _"));
  }
  for (const std::string& schema : settings.search_path()) {
    if (schema != "$user" && (!postgres::IsPlainIdentifier(schema) ||
                              absl::StartsWith(schema, "pg_"))) {
      return bad(absl::StrCat(
          "search_path=", absl::StrJoin(settings.search_path(), ","),
          " must list schemas (1-63 lower-case letters, digits and _, "
          "not pg_...) or $user, separated by commas; pg_temp is added "
          "last by the gateway"));
    }
  }
  for (const std::string& name : settings.session_safe_functions()) {
    if (!postgres::IsPlainIdentifier(name)) {
      return bad(absl::StrCat(
          "session_safe_functions=",
          absl::StrJoin(settings.session_safe_functions(), ","),
          " must list function names (1-63 lower-case letters, digits and "
          "_), separated by commas"));
    }
  }
  if (!settings.read_user().empty() &&
      !postgres::IsPlainIdentifier(settings.read_user())) {
    return bad(absl::StrCat("read_user=", settings.read_user(),
                            " must be 1-63 lower-case letters, digits and _"));
  }
  if (settings.read_user().empty() && !settings.read_password().empty()) {
    return bad("read_password needs read_user");
  }
  return settings;
}

absl::StatusOr<RouteOptions> ParseRouteUri(const Uri& uri,
                                           const v1::PostgresRoute* typed) {
  RouteOptions options;
  options.redacted_uri = uri.redacted;
  std::vector<std::string> passthrough;
  absl::StatusOr<v1::PostgresRoute> settings =
      ParseRouteSettings(uri, typed, &passthrough);
  if (!settings.ok()) return settings.status();
  options.pool_size = static_cast<int>(settings->pool_size());
  options.pool_wait_ms = settings->pool_wait_ms();
  options.spread_after_ms = settings->spread_after_ms();
  options.statement_timeout_ms = settings->statement_timeout_ms();
  options.fence_schema = settings->fence_schema();
  options.max_result_rows = settings->max_result_rows();
  options.max_result_bytes = settings->max_result_bytes();
  options.max_sql_bytes = settings->max_sql_bytes();
  options.max_connections_per_caller = settings->max_connections_per_caller();
  options.held_domains = settings->held_domains();
  options.session_safe_functions.assign(
      settings->session_safe_functions().begin(),
      settings->session_safe_functions().end());
  options.allow_privileged_role = settings->allow_privileged_role();
  options.allow_dirty_statements = settings->allow_dirty_statements();
  options.search_path.assign(settings->search_path().begin(),
                             settings->search_path().end());
  options.read_user = settings->read_user();
  options.read_password = settings->read_password();
  // libpq parameters the adapter sets unless the URI does: a server or
  // network that goes silent fails a write within about a minute instead
  // of holding its connection for ever.
  std::vector<std::pair<std::string, std::string>> defaults = {
      {"client_encoding", "UTF8"},   {"connect_timeout", "5"},
      {"keepalives", "1"},           {"keepalives_idle", "30"},
      {"keepalives_interval", "10"}, {"keepalives_count", "3"},
      {"tcp_user_timeout", "60000"}};
  for (const std::string& param : passthrough) {
    const std::string key = param.substr(0, param.find('='));
    defaults.erase(
        std::remove_if(defaults.begin(), defaults.end(),
                       [&](const auto& d) { return d.first == key; }),
        defaults.end());
  }
  for (const auto& [key, value] : defaults) {
    passthrough.push_back(absl::StrCat(key, "=", value));
  }
  // In the startup packet, statement_timeout and search_path are the
  // session's reset values, which a reset (DISCARD ALL) restores. Each
  // schema is quoted, and pg_temp comes last, so that no temporary object
  // can shadow a table or function a Write names (%20 is a space, %3D '=',
  // %22 '"', %2C ',').
  std::vector<std::string> path;
  for (const std::string& schema : options.search_path) {
    path.push_back(absl::StrCat("%22", schema, "%22"));
  }
  path.push_back("pg_temp");
  // standard_conforming_strings as PostgreSQL's parser in the classifier
  // reads text; SetUpConnection checks it and client_encoding.
  passthrough.push_back(absl::StrCat(
      "options=-c%20statement_timeout%3D", options.statement_timeout_ms,
      "%20-c%20search_path%3D", absl::StrJoin(path, "%2C"),
      "%20-c%20standard_conforming_strings%3Don"));
  if (uri.authority.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("adapter URI \"", options.redacted_uri,
                     "\": expected postgres://user@host[:port]/database"));
  }
  options.conninfo = absl::StrCat("postgresql://", uri.authority, uri.path, "?",
                                  absl::StrJoin(passthrough, "&"));
  return options;
}

size_t PerCallerConnections(const RouteOptions& options) {
  if (options.max_connections_per_caller <= 0) return 0;
  return static_cast<size_t>(std::min<int64_t>(
      options.max_connections_per_caller, std::max(options.pool_size, 1)));
}

}  // namespace fencegate::postgres
