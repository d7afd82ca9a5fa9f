// Copyright fencegate authors.
//
// Router: maps a resource "<route>/<path>" to the adapter configured for
// <route>. Built once at start-up; lookups are a hash probe.

#ifndef STORAGE_ADAPTERS_ROUTER_H_
#define STORAGE_ADAPTERS_ROUTER_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "storage_adapters/registry.h"
#include "storage_adapters/storage_adapter.h"

namespace fencegate {

struct NamedStatementSpec {
  // [A-Za-z0-9_]{1,64}, unique within the route.
  std::string name;
  // One SQL statement with $n parameters.
  std::string sql;
  // The operator vouches that it leaves nothing behind in a pooled session
  // (the PostgreSQL adapter then runs it as safe whatever its parse says).
  // Default: false.
  bool session_safe = false;
};

struct RouteSpec {
  // First path segment of the resources it serves: [A-Za-z0-9_.-]+.
  std::string name;
  // Adapter URI, e.g. "file:///var/lib/fencegate/files".
  std::string uri;
  // Named SQL statements; each must pass the adapter's AddNamedStatement().
  std::vector<NamedStatementSpec> statements = {};
  // The adapter's typed settings from the configuration file (for a
  // postgres:// route, a v1::PostgresRoute), or null. See AdapterContext.
  std::shared_ptr<const google::protobuf::Message> settings = nullptr;
};

struct ResolvedResource {
  // Owned by the Router.
  StorageAdapter* adapter = nullptr;
  absl::string_view route;
  // The resource without "<route>/"; a view into the resolved string.
  absl::string_view path;
  // The route's named statements (owned by the Router).
  const absl::flat_hash_map<std::string, std::string>* statements = nullptr;
};

// Immutable after Create(); safe for concurrent use.
class Router {
 public:
  // Builds every route's adapter. INVALID_ARGUMENT for no routes, a bad or
  // duplicate route name, a bad URI, or a bad, duplicate or refused named
  // statement (the message names the route); otherwise the factory's error.
  // Each route's adapter gets the route's name and `metrics`.
  // Each adapter's warnings go to `on_warning`, prefixed with its route;
  // each gets `sql_classifier` (AdapterContext::sql_classifier).
  static absl::StatusOr<std::unique_ptr<Router>> Create(
      const AdapterRegistry& registry, const std::vector<RouteSpec>& routes,
      const MetricsContext& metrics = {},
      std::function<void(const std::string&)> on_warning = {},
      postgres::SqlClassifier* sql_classifier = nullptr);

  // INVALID_ARGUMENT, naming the field "resource", for a resource without
  // "<route>/" or with an unknown route (the message lists the known ones).
  absl::StatusOr<ResolvedResource> Resolve(absl::string_view resource) const;

  // Runs every adapter's CheckAtStartup(), in route-name order. The first
  // error, prefixed with its route's name; else one "route NAME: ..." line
  // per adapter that had something to say.
  absl::StatusOr<std::vector<std::string>> CheckAtStartup() const;

  // Sets the SQL of each SQL operation of `ops` that names a statement to
  // the statement's SQL (keeping its name and parameters). INVALID_ARGUMENT
  // naming the operation for an unknown name, or for both or neither of sql and
  // statement.
  static absl::Status ExpandStatements(
      const ResolvedResource& resolved,
      google::protobuf::RepeatedPtrField<v1::Operation>* ops);

  // Every route's name and adapter (owned by the Router), by name.
  std::vector<std::pair<std::string, StorageAdapter*>> Adapters() const;

  // The URI of route `name` as the Router parsed it (its scheme in lower
  // case), once, for whatever else serves the route (the PostgreSQL port);
  // null for an unknown route.
  const Uri* UriOf(absl::string_view name) const;

  // Calls every adapter's CancelInFlight().
  void CancelInFlight() const;

 private:
  struct Route {
    Uri uri;
    std::unique_ptr<StorageAdapter> adapter;
    absl::flat_hash_map<std::string, std::string> statements;
  };
  Router() = default;
  absl::flat_hash_map<std::string, Route> routes_;
};

}  // namespace fencegate

#endif  // STORAGE_ADAPTERS_ROUTER_H_
