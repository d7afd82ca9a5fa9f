// Copyright fencegate authors.

#include "storage_adapters/storage_adapter.h"

namespace fencegate {

absl::Status StorageAdapter::AddNamedStatement(const std::string& name,
                                               const std::string& sql,
                                               bool session_safe) {
  (void)session_safe;  // Only adapters that pool sessions need it.
  Operations probe;
  v1::SqlStatement* statement = probe.Add()->mutable_sql();
  statement->set_sql(sql);
  statement->set_statement(name);
  return Validate(WriteTarget{"statement", 0, "statement", ""}, probe);
}

absl::Status StorageAdapter::RaiseFence(absl::string_view, uint64_t) {
  return absl::UnimplementedError("this storage keeps no fences");
}

absl::StatusOr<uint64_t> StorageAdapter::NextFence(absl::string_view,
                                                   uint64_t) {
  return absl::UnimplementedError("this storage keeps no fences");
}

absl::StatusOr<uint64_t> StorageAdapter::ReadFence(absl::string_view domain) {
  uint64_t found = 0;
  absl::Status s = ReadFences([&](absl::string_view d, uint64_t token) {
    if (d == domain) found = token;
  });
  if (!s.ok()) return s;
  return found;
}

absl::Status StorageAdapter::ReadFences(
    absl::FunctionRef<void(absl::string_view, uint64_t)>) {
  return absl::UnimplementedError("this storage keeps no fences");
}

}  // namespace fencegate
