// Copyright fencegate authors.

#include "storage_adapters/registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fencegate {

absl::Status AdapterRegistry::Register(
    std::string scheme, AdapterFactory factory,
    const google::protobuf::Descriptor* settings) {
  auto [it, inserted] =
      factories_.try_emplace(scheme, Entry{std::move(factory), settings});
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
  return Create(*uri, context);
}

absl::StatusOr<std::unique_ptr<StorageAdapter>> AdapterRegistry::Create(
    const Uri& parsed, const AdapterContext& context) const {
  const Uri* uri = &parsed;
  auto it = factories_.find(uri->scheme);
  if (it == factories_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "adapter URI \"", uri->redacted, "\": unknown scheme \"", uri->scheme,
        "\" (known: ", absl::StrJoin(Schemes(), ", "), ")"));
  }
  if (context.settings != nullptr &&
      context.settings->GetDescriptor() != it->second.settings) {
    return absl::InvalidArgumentError(
        absl::StrCat("adapter URI \"", uri->redacted, "\": settings of type ",
                     context.settings->GetDescriptor()->full_name(),
                     " are not for ", uri->scheme, "://",
                     it->second.settings == nullptr
                         ? ", which takes none"
                         : absl::StrCat(", which takes ",
                                        it->second.settings->full_name())));
  }
  return it->second.factory(*uri, context);
}

std::vector<std::string> AdapterRegistry::Schemes() const {
  std::vector<std::string> schemes;
  for (const auto& [scheme, factory] : factories_) schemes.push_back(scheme);
  std::sort(schemes.begin(), schemes.end());
  return schemes;
}

}  // namespace fencegate
