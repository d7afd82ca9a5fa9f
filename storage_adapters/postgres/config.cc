// Copyright fencegate authors.

#include "storage_adapters/postgres/config.h"

#include <utility>

#include "postgres/route_options.h"
#include "storage_adapters/postgres/postgres_adapter.h"

namespace fencegate {

absl::StatusOr<std::unique_ptr<StorageAdapter>> CreatePostgresAdapter(
    const Uri& uri, const AdapterContext& context) {
  absl::StatusOr<postgres::RouteOptions> options = postgres::ParseRouteUri(
      uri, static_cast<const v1::PostgresRoute*>(context.settings));
  if (!options.ok()) return options.status();
  return std::unique_ptr<StorageAdapter>(
      std::make_unique<PostgresAdapter>(*std::move(options), context));
}

}  // namespace fencegate
