// Copyright fencegate authors.

#include "storage_adapters/postgres/config.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "storage_adapters/postgres/fence_schema.h"
#include "storage_adapters/postgres/postgres_adapter.h"

namespace fencegate {
namespace {

absl::Status ParseInt(const Uri& uri, absl::string_view key,
                      absl::string_view value, int64_t min, int64_t max,
                      int64_t* out) {
  if (!absl::SimpleAtoi(value, out) || *out < min || *out > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("adapter URI \"", uri.redacted, "\": ", key, "=", value,
                     " must be a number from ", min, " to ", max));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PostgresAdapterOptions> ParsePostgresUri(const Uri& uri) {
  PostgresAdapterOptions options;
  options.redacted_uri = uri.redacted;
  std::vector<std::string> passthrough;
  // libpq parameters the adapter sets unless the URI does: a server or
  // network that goes silent fails a write within about a minute instead
  // of holding its connection for ever.
  std::vector<std::pair<std::string, std::string>> defaults = {
      {"client_encoding", "UTF8"},   {"connect_timeout", "5"},
      {"keepalives", "1"},           {"keepalives_idle", "30"},
      {"keepalives_interval", "10"}, {"keepalives_count", "3"},
      {"tcp_user_timeout", "60000"}};
  if (!uri.query.empty()) {
    for (absl::string_view pair : absl::StrSplit(uri.query, '&')) {
      if (pair.empty()) continue;
      std::pair<absl::string_view, absl::string_view> kv =
          absl::StrSplit(pair, absl::MaxSplits('=', 1));
      int64_t n = 0;
      absl::Status s;
      if (kv.first == "pool_size") {
        s = ParseInt(uri, kv.first, kv.second, 1, 1024, &n);
        options.pool_size = static_cast<int>(n);
      } else if (kv.first == "pool_wait_ms") {
        s = ParseInt(uri, kv.first, kv.second, 1, 3600000, &n);
        options.pool_wait_ms = n;
      } else if (kv.first == "spread_after_ms") {
        s = ParseInt(uri, kv.first, kv.second, 0, 3600000, &n);
        options.spread_after_ms = n;
      } else if (kv.first == "statement_timeout_ms") {
        s = ParseInt(uri, kv.first, kv.second, 0, 86400000, &n);
        options.statement_timeout_ms = n;
      } else if (kv.first == "max_result_rows") {
        s = ParseInt(uri, kv.first, kv.second, 0, 10000000, &n);
        options.max_result_rows = n;
      } else if (kv.first == "max_result_bytes") {
        s = ParseInt(uri, kv.first, kv.second, 0, int64_t{1} << 30, &n);
        options.max_result_bytes = n;
      } else if (kv.first == "fence_schema") {
        if (!postgres::IsPlainIdentifier(kv.second)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "adapter URI \"", options.redacted_uri, "\": fence_schema=",
              kv.second, " must be 1-63 lower-case letters, digits and _"));
        }
        options.fence_schema = std::string(kv.second);
      } else if (kv.first == "fence_table") {
        return absl::InvalidArgumentError(absl::StrCat(
            "adapter URI \"", options.redacted_uri,
            "\": fence_table is gone; the fence table is now "
            "<fence_schema>.fences, created by `fencectl pg-setup` "
            "(docs/postgres.md)"));
      } else if (kv.first == "allow_privileged_role") {
        if (kv.second != "true" && kv.second != "false") {
          return absl::InvalidArgumentError(
              absl::StrCat("adapter URI \"", options.redacted_uri,
                           "\": allow_privileged_role must be true or false"));
        }
        options.allow_privileged_role = kv.second == "true";
      } else if (kv.first == "allow_dirty_statements") {
        if (kv.second != "true" && kv.second != "false") {
          return absl::InvalidArgumentError(
              absl::StrCat("adapter URI \"", options.redacted_uri,
                           "\": allow_dirty_statements must be true or false"));
        }
        options.allow_dirty_statements = kv.second == "true";
      } else if (kv.first == "search_path") {
        std::vector<std::string> schemas =
            absl::StrSplit(kv.second, ',', absl::SkipEmpty());
        for (const std::string& schema : schemas) {
          if (schema != "$user" && (!postgres::IsPlainIdentifier(schema) ||
                                    absl::StartsWith(schema, "pg_"))) {
            return absl::InvalidArgumentError(absl::StrCat(
                "adapter URI \"", options.redacted_uri,
                "\": search_path=", kv.second,
                " must list schemas (1-63 lower-case letters, digits and _, "
                "not pg_...) or $user, separated by commas; pg_temp is added "
                "last by the gateway"));
          }
        }
        options.search_path = std::move(schemas);
      } else if (kv.first == "client_encoding") {
        return absl::InvalidArgumentError(absl::StrCat(
            "adapter URI \"", options.redacted_uri,
            "\": client_encoding is not accepted: the gateway speaks UTF8 to "
            "PostgreSQL (its SQL classifier reads text as UTF-8)"));
      } else if (kv.first == "options") {
        return absl::InvalidArgumentError(absl::StrCat(
            "adapter URI \"", options.redacted_uri,
            "\": options is not accepted: session settings given at "
            "connection would apply to every Write (the route role may hold "
            "no settings of its own either; docs/postgres.md)"));
      } else {
        defaults.erase(
            std::remove_if(defaults.begin(), defaults.end(),
                           [&](const auto& d) { return d.first == kv.first; }),
            defaults.end());
        passthrough.emplace_back(pair);
      }
      if (!s.ok()) return s;
    }
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

absl::StatusOr<std::unique_ptr<StorageAdapter>> CreatePostgresAdapter(
    const Uri& uri, const AdapterContext& context) {
  absl::StatusOr<PostgresAdapterOptions> options = ParsePostgresUri(uri);
  if (!options.ok()) return options.status();
  return std::unique_ptr<StorageAdapter>(
      std::make_unique<PostgresAdapter>(*std::move(options), context));
}

}  // namespace fencegate
