// Copyright fencegate authors.

#include "storage_adapters/file/config.h"

#include "absl/strings/str_cat.h"
#include "storage_adapters/file/file_adapter.h"

namespace fencegate {

absl::StatusOr<std::unique_ptr<StorageAdapter>> CreateFileAdapter(
    const Uri& uri, const AdapterContext& context) {
  if (!uri.authority.empty() && uri.authority != "localhost") {
    return absl::InvalidArgumentError(
        absl::StrCat("adapter URI \"", uri.redacted,
                     "\": a file URI has no host; use file:///absolute/path"));
  }
  if (!uri.query.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "adapter URI \"", uri.redacted, "\": file URIs take no parameters"));
  }
  if (uri.path.empty() || uri.path[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("adapter URI \"", uri.redacted,
                     "\": the root must be an absolute path"));
  }
  absl::StatusOr<std::unique_ptr<FileAdapter>> adapter =
      FileAdapter::Open(uri.path);
  if (!adapter.ok()) return adapter.status();
  return std::unique_ptr<StorageAdapter>(*std::move(adapter));
}

}  // namespace fencegate
