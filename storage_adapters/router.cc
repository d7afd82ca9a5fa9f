// Copyright fencegate authors.

#include "storage_adapters/router.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fencegate {
namespace {

bool IsValidRouteName(absl::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' ||
           c == '-' || c == '.';
  });
}

bool IsValidStatementName(absl::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<Router>> Router::Create(
    const AdapterRegistry& registry, const std::vector<RouteSpec>& routes,
    const MetricsContext& metrics,
    std::function<void(const std::string&)> on_warning,
    postgres::SqlClassifier* sql_classifier) {
  if (routes.empty()) {
    return absl::InvalidArgumentError("routes: at least one route is needed");
  }
  std::unique_ptr<Router> router(new Router());
  for (const RouteSpec& spec : routes) {
    if (!IsValidRouteName(spec.name) || spec.name == "." || spec.name == "..") {
      return absl::InvalidArgumentError(absl::StrCat(
          "route \"", spec.name,
          "\": a name is 1-64 of letters, digits, '_', '-' and '.'"));
    }
    if (router->routes_.contains(spec.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("route \"", spec.name, "\": defined twice"));
    }
    AdapterContext context{
        spec.name, metrics, {}, spec.settings.get(), sql_classifier};
    if (on_warning) {
      context.on_warning = [on_warning,
                            route = spec.name](const std::string& message) {
        on_warning(absl::StrCat("route ", route, ": ", message));
      };
    }
    absl::StatusOr<Uri> uri = ParseUri(spec.uri);
    absl::StatusOr<std::unique_ptr<StorageAdapter>> adapter =
        uri.ok()
            ? registry.Create(*uri, context)
            : absl::StatusOr<std::unique_ptr<StorageAdapter>>(uri.status());
    if (!adapter.ok()) {
      return absl::Status(adapter.status().code(),
                          absl::StrCat("route \"", spec.name,
                                       "\": ", adapter.status().message()));
    }
    Route route{*std::move(uri), *std::move(adapter), {}};
    for (const NamedStatementSpec& statement : spec.statements) {
      const std::string& name = statement.name;
      const std::string& sql = statement.sql;
      auto bad = [&](absl::string_view why) {
        return absl::InvalidArgumentError(absl::StrCat(
            "route \"", spec.name, "\": statement \"", name, "\": ", why));
      };
      if (!IsValidStatementName(name)) {
        return bad("a name is 1-64 of letters, digits and '_'");
      }
      if (route.statements.contains(name)) return bad("defined twice");
      if (absl::Status s = route.adapter->AddNamedStatement(
              name, sql, statement.session_safe);
          !s.ok()) {
        return bad(s.message());
      }
      route.statements.emplace(name, sql);
    }
    router->routes_.emplace(spec.name, std::move(route));
  }
  return router;
}

absl::StatusOr<ResolvedResource> Router::Resolve(
    absl::string_view resource) const {
  size_t slash = resource.find('/');
  if (resource.empty() || slash == absl::string_view::npos || slash == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("resource: \"", resource,
                     "\" must be \"<route>/<path>\", e.g. "
                     "\"files/reports/daily.csv\""));
  }
  absl::string_view route = resource.substr(0, slash);
  auto it = routes_.find(route);
  if (it == routes_.end()) {
    std::vector<absl::string_view> names;
    for (const auto& [name, unused] : routes_) names.push_back(name);
    std::sort(names.begin(), names.end());
    return absl::InvalidArgumentError(
        absl::StrCat("resource: unknown route \"", route,
                     "\" (configured: ", absl::StrJoin(names, ", "), ")"));
  }
  return ResolvedResource{it->second.adapter.get(), route,
                          resource.substr(slash + 1), &it->second.statements};
}

absl::Status Router::ExpandStatements(
    const ResolvedResource& resolved,
    google::protobuf::RepeatedPtrField<v1::Operation>* ops) {
  for (int i = 0; i < ops->size(); ++i) {
    if (!ops->Get(i).has_sql()) continue;
    v1::SqlStatement* sql = ops->Mutable(i)->mutable_sql();
    if (sql->has_sql() == sql->has_statement()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ops[", i, "].sql: exactly one of sql and statement is needed"));
    }
    if (!sql->has_statement()) continue;
    auto it = resolved.statements->find(sql->statement());
    if (it == resolved.statements->end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("ops[", i, "].sql.statement: route \"", resolved.route,
                       "\" has no statement \"", sql->statement(), "\""));
    }
    sql->set_sql(it->second);
  }
  return absl::OkStatus();
}

void Router::CancelInFlight() const {
  for (const auto& [name, route] : routes_) route.adapter->CancelInFlight();
}

absl::StatusOr<std::vector<std::string>> Router::CheckAtStartup() const {
  std::vector<std::string> names;
  for (const auto& [name, route] : routes_) names.push_back(name);
  std::sort(names.begin(), names.end());
  std::vector<std::string> lines;
  for (const std::string& name : names) {
    absl::StatusOr<std::string> line =
        routes_.at(name).adapter->CheckAtStartup();
    if (!line.ok()) {
      return absl::Status(
          line.status().code(),
          absl::StrCat("route ", name, ": ", line.status().message()));
    }
    if (!line->empty())
      lines.push_back(absl::StrCat("route ", name, ": ", *line));
  }
  return lines;
}

std::vector<std::pair<std::string, StorageAdapter*>> Router::Adapters() const {
  std::vector<std::pair<std::string, StorageAdapter*>> adapters;
  for (const auto& [name, route] : routes_) {
    adapters.emplace_back(name, route.adapter.get());
  }
  std::sort(adapters.begin(), adapters.end());
  return adapters;
}

const Uri* Router::UriOf(absl::string_view name) const {
  auto it = routes_.find(name);
  return it == routes_.end() ? nullptr : &it->second.uri;
}

}  // namespace fencegate
