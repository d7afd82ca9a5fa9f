// Copyright fencegate authors.
//
// Factory of the PostgreSQL adapter, registered for "postgres://" and
// "postgresql://" URIs; the route's settings are read by ParseRouteUri
// (postgres/include/postgres/route_options.h), which the PostgreSQL port
// shares.

#ifndef STORAGE_ADAPTERS_POSTGRES_CONFIG_H_
#define STORAGE_ADAPTERS_POSTGRES_CONFIG_H_

#include <memory>

#include "absl/status/statusor.h"
#include "fencegate/common/uri.h"
#include "storage_adapters/registry.h"
#include "storage_adapters/storage_adapter.h"

namespace fencegate {

// postgres::ParseRouteUri, then builds the adapter. Does not connect: the first
// Write (or the first count of the gateways present) does, so the gateway
// starts even while PostgreSQL is down.
absl::StatusOr<std::unique_ptr<StorageAdapter>> CreatePostgresAdapter(
    const Uri& uri, const AdapterContext& context);

}  // namespace fencegate

#endif  // STORAGE_ADAPTERS_POSTGRES_CONFIG_H_
