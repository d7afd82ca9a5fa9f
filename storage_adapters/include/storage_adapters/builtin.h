// Copyright fencegate authors.
//
// Registers every adapter shipped with fencegate: file://, postgres:// (and
// its alias postgresql://), noop://.

#ifndef STORAGE_ADAPTERS_BUILTIN_H_
#define STORAGE_ADAPTERS_BUILTIN_H_

#include "absl/status/status.h"
#include "storage_adapters/registry.h"

namespace fencegate {

absl::Status RegisterBuiltinAdapters(AdapterRegistry* registry);

}  // namespace fencegate

#endif  // STORAGE_ADAPTERS_BUILTIN_H_
