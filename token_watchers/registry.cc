// Copyright fencegate authors.

#include "token_watchers/registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fencegate {

absl::Status TokenWatcherRegistry::Register(std::string kind,
                                            TokenWatcherFactory factory) {
  auto [it, inserted] = factories_.try_emplace(kind, std::move(factory));
  if (!inserted) {
    return absl::AlreadyExistsError(
        absl::StrCat("token watcher \"", kind, "\" is already registered"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TokenWatcher>> TokenWatcherRegistry::Create(
    const TokenWatcherSpec& spec, TokenWatcherContext context) const {
  auto it = factories_.find(spec.kind);
  if (it == factories_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown token watcher \"", spec.kind,
                     "\" (known: ", absl::StrJoin(Kinds(), ", "), ")"));
  }
  if (!context.on_holder) {
    return absl::InvalidArgumentError(
        absl::StrCat(spec.kind, " watcher: no on_holder callback"));
  }
  if (spec.endpoint.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(spec.kind, " watcher: an endpoint is required"));
  }
  if (spec.rpc_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat(spec.kind, " watcher: rpc_timeout must be positive, not ",
                     absl::FormatDuration(spec.rpc_timeout)));
  }
  return it->second(spec, std::move(context));
}

std::shared_ptr<void> ExportConnected(const MetricsContext& metrics,
                                      absl::string_view kind,
                                      const std::atomic<bool>& connected) {
  if (!metrics.enabled()) return nullptr;
  return metrics.scrape_gauges->Add(
      "fencegate_watcher_connected",
      "1 while the gateway follows the lock service's locks",
      {{"source", std::string(kind)}},
      [&connected] { return connected.load() ? 1.0 : 0.0; });
}

std::vector<std::string> TokenWatcherRegistry::Kinds() const {
  std::vector<std::string> kinds;
  for (const auto& [kind, factory] : factories_) kinds.push_back(kind);
  std::sort(kinds.begin(), kinds.end());
  return kinds;
}

}  // namespace fencegate
