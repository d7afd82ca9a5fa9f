// Copyright fencegate authors.

#include "storage_adapters/registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fencegate {

absl::Status AdapterRegistry::Register(std::string scheme,
                                       AdapterFactory factory) {
  auto [it, inserted] = factories_.try_emplace(scheme, std::move(factory));
  if (!inserted) {
    return absl::AlreadyExistsError(
        absl::StrCat("adapter scheme \"", scheme, "\" is already registered"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<StorageAdapter>> AdapterRegistry::Create(
    absl::string_view text, const AdapterContext& context) const {
  absl::StatusOr<Uri> uri = ParseUri(text);
  if (!uri.ok()) return uri.status();
  auto it = factories_.find(uri->scheme);
  if (it == factories_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "adapter URI \"", uri->redacted, "\": unknown scheme \"", uri->scheme,
        "\" (known: ", absl::StrJoin(Schemes(), ", "), ")"));
  }
  return it->second(*uri, context);
}

std::vector<std::string> AdapterRegistry::Schemes() const {
  std::vector<std::string> schemes;
  for (const auto& [scheme, factory] : factories_) schemes.push_back(scheme);
  std::sort(schemes.begin(), schemes.end());
  return schemes;
}

}  // namespace fencegate
