// Copyright fencegate authors.

#include "storage_adapters/builtin.h"

#include "storage_adapters/file/config.h"

namespace fencegate {

absl::Status RegisterBuiltinAdapters(AdapterRegistry* registry) {
  return registry->Register("file", CreateFileAdapter);
}

}  // namespace fencegate
