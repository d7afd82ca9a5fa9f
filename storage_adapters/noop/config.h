// Copyright fencegate authors.
//
// The no-op adapter, registered for "noop://": accepts any well-formed
// operation and stores nothing. It isolates the gateway's own cost (RPC,
// validation, fencing, the fence store) in benchmarks, and lets a
// deployment fence-check requests without a backend. Takes no parameters.

#ifndef STORAGE_ADAPTERS_NOOP_CONFIG_H_
#define STORAGE_ADAPTERS_NOOP_CONFIG_H_

#include <memory>

#include "absl/status/statusor.h"
#include "fencegate/common/uri.h"
#include "storage_adapters/registry.h"
#include "storage_adapters/storage_adapter.h"

namespace fencegate {

absl::StatusOr<std::unique_ptr<StorageAdapter>> CreateNoopAdapter(
    const Uri& uri, const AdapterContext& context);

}  // namespace fencegate

#endif  // STORAGE_ADAPTERS_NOOP_CONFIG_H_
