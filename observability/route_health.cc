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
  thread_ = std::thread([this] {
    for (;;) {
      {
        absl::MutexLock lock(&mu_);
        if (mu_.AwaitWithTimeout(absl::Condition(&stop_), interval_)) return;
      }
      ProbeAll();
    }
  });
}

void RouteHealth::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void RouteHealth::ProbeAll() {
  for (const auto& [name, adapter] : routes_) {
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;  // Stop() waits for one probe at most.
    }
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
