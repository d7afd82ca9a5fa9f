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

}  // namespace

absl::StatusOr<std::unique_ptr<Router>> Router::Create(
    const AdapterRegistry& registry, const std::vector<RouteSpec>& routes) {
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
    absl::StatusOr<std::unique_ptr<StorageAdapter>> adapter =
        registry.Create(spec.uri);
    if (!adapter.ok()) {
      return absl::Status(adapter.status().code(),
                          absl::StrCat("route \"", spec.name,
                                       "\": ", adapter.status().message()));
    }
    router->routes_.emplace(spec.name, *std::move(adapter));
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
    for (const auto& [name, adapter] : routes_) names.push_back(name);
    std::sort(names.begin(), names.end());
    return absl::InvalidArgumentError(
        absl::StrCat("resource: unknown route \"", route,
                     "\" (configured: ", absl::StrJoin(names, ", "), ")"));
  }
  return ResolvedResource{it->second.get(), route, resource.substr(slash + 1)};
}

void Router::CancelInFlight() const {
  for (const auto& [name, adapter] : routes_) adapter->CancelInFlight();
}

absl::StatusOr<std::vector<std::string>> Router::CheckAtStartup() const {
  std::vector<std::string> names;
  for (const auto& [name, adapter] : routes_) names.push_back(name);
  std::sort(names.begin(), names.end());
  std::vector<std::string> lines;
  for (const std::string& name : names) {
    absl::StatusOr<std::string> line = routes_.at(name)->CheckAtStartup();
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

}  // namespace fencegate
