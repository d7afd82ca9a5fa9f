// Copyright fencegate authors.

#include "storage_adapters/storage_adapter.h"

#include <cstdint>
#include <random>
#include <string>

#include "absl/strings/str_format.h"

namespace fencegate {

const std::string& GatewayInstanceId() {
  static const std::string* const kId = [] {
    std::random_device device;
    const uint64_t bits = (static_cast<uint64_t>(device()) << 32) | device();
    return new std::string(absl::StrFormat("%016x", bits));
  }();
  return *kId;
}

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
