// Copyright fencegate authors.
//
// Factory of the file adapter, registered for "file://" URIs.
//
//   file:///absolute/root
//
// The root directory is created if missing. No host and no query parameters
// are accepted.

#ifndef STORAGE_ADAPTERS_FILE_CONFIG_H_
#define STORAGE_ADAPTERS_FILE_CONFIG_H_

#include <memory>

#include "absl/status/statusor.h"
#include "fencegate/common/uri.h"
#include "storage_adapters/registry.h"
#include "storage_adapters/storage_adapter.h"

namespace fencegate {

absl::StatusOr<std::unique_ptr<StorageAdapter>> CreateFileAdapter(
    const Uri& uri, const AdapterContext& context);

}  // namespace fencegate

#endif  // STORAGE_ADAPTERS_FILE_CONFIG_H_
