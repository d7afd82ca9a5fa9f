// Copyright fencegate authors.
//
// Router: maps a resource "<route>/<path>" to the adapter configured for
// <route>. Built once at start-up; lookups are a hash probe.

#ifndef STORAGE_ADAPTERS_ROUTER_H_
#define STORAGE_ADAPTERS_ROUTER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "storage_adapters/registry.h"
#include "storage_adapters/storage_adapter.h"

namespace fencegate {

struct RouteSpec {
  // First path segment of the resources it serves: [A-Za-z0-9_.-]+.
  std::string name;
  // Adapter URI, e.g. "file:///var/lib/fencegate/files".
  std::string uri;
};

struct ResolvedResource {
  // Owned by the Router.
  StorageAdapter* adapter = nullptr;
  absl::string_view route;
  // The resource without "<route>/"; a view into the resolved string.
  absl::string_view path;
};

// Immutable after Create(); safe for concurrent use.
class Router {
 public:
  // Builds every route's adapter. INVALID_ARGUMENT for no routes, a bad or
  // duplicate route name, or a bad URI (the message names the route);
  // otherwise the factory's error.
  static absl::StatusOr<std::unique_ptr<Router>> Create(
      const AdapterRegistry& registry, const std::vector<RouteSpec>& routes);

  // INVALID_ARGUMENT, naming the field "resource", for a resource without
  // "<route>/" or with an unknown route (the message lists the known ones).
  absl::StatusOr<ResolvedResource> Resolve(absl::string_view resource) const;

  // Runs every adapter's CheckAtStartup(), in route-name order. The first
  // error, prefixed with its route's name; else one "route NAME: ..." line
  // per adapter that had something to say.
  absl::StatusOr<std::vector<std::string>> CheckAtStartup() const;

  // Calls every adapter's CancelInFlight().
  void CancelInFlight() const;

 private:
  Router() = default;
  absl::flat_hash_map<std::string, std::unique_ptr<StorageAdapter>> routes_;
};

}  // namespace fencegate

#endif  // STORAGE_ADAPTERS_ROUTER_H_
