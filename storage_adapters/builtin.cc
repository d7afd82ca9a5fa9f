// Copyright fencegate authors.

#include "storage_adapters/builtin.h"

#include "fencegate/v1/config.pb.h"
#include "storage_adapters/file/config.h"
#include "storage_adapters/noop/config.h"
#include "storage_adapters/postgres/config.h"

namespace fencegate {

absl::Status RegisterBuiltinAdapters(AdapterRegistry* registry) {
  if (absl::Status s = registry->Register("file", CreateFileAdapter); !s.ok()) {
    return s;
  }
  if (absl::Status s = registry->Register("postgres", CreatePostgresAdapter,
                                          v1::PostgresRoute::descriptor());
      !s.ok()) {
    return s;
  }
  if (absl::Status s = registry->Register("noop", CreateNoopAdapter); !s.ok()) {
    return s;
  }
  return registry->Register("postgresql", CreatePostgresAdapter,
                            v1::PostgresRoute::descriptor());
}

}  // namespace fencegate
