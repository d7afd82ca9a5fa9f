// Copyright fencegate authors.

#include "observability/route_health.h"

#include "absl/strings/str_cat.h"
#include "observability/log.h"

namespace fencegate {

RouteHealth::RouteHealth(
    std::vector<std::pair<std::string, StorageAdapter*>> routes,
    grpc::HealthCheckServiceInterface* health, absl::Duration interval)
    : routes_(std::move(routes)), health_(health), interval_(interval) {}

RouteHealth::~RouteHealth() { Stop(); }

void RouteHealth::Start() {
  ProbeAll();
  thread_.Start("fg-health", interval_, [this] { ProbeAll(); });
}

void RouteHealth::Stop() { thread_.Stop(); }

void RouteHealth::ProbeAll() {
  for (const auto& [name, adapter] : routes_) {
    if (thread_.stopping()) return;  // Stop() waits for one probe at most.
    const absl::Status probe = adapter->Probe();
    auto [it, first] = serving_.try_emplace(name, probe.ok());
    if (!first && it->second == probe.ok()) continue;
    it->second = probe.ok();
    health_->SetServingStatus(absl::StrCat("route/", name), probe.ok());
    if (probe.ok()) {
      if (!first)
        Log(LogSeverity::kInfo, absl::StrCat("route ", name,
                                             ": storage reachable "
                                             "again: SERVING"));
    } else {
      Log(LogSeverity::kWarning,
          absl::StrCat("route ", name, ": NOT_SERVING: ", probe.message()));
    }
  }
}

}  // namespace fencegate
