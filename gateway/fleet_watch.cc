// Copyright fencegate authors.

#include "gateway/fleet_watch.h"

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "observability/log.h"

namespace fencegate {

FleetWatch::FleetWatch(
    std::vector<std::pair<std::string, StorageAdapter*>> routes,
    absl::Duration interval)
    : routes_(std::move(routes)), interval_(interval) {}

FleetWatch::~FleetWatch() { Stop(); }

void FleetWatch::Start() {
  CountAll();
  thread_.Start("fg-fleet", interval_, [this] { CountAll(); });
}

void FleetWatch::Stop() { thread_.Stop(); }

void FleetWatch::CountAll() {
  const absl::Time started = absl::Now();
  absl::Status verdict;
  for (const auto& [name, adapter] : routes_) {
    absl::StatusOr<int> others = adapter->OtherGateways();
    if (absl::IsUnimplemented(others.status())) continue;  // Not shared.
    if (!others.ok()) {
      verdict = absl::UnavailableError(
          absl::StrCat("cannot tell whether other gateways share route \"",
                       name, "\", so no LEASE-bound domain is served: ",
                       others.status().message()));
      break;
    }
    if (*others > 0) {
      verdict = absl::FailedPreconditionError(absl::StrCat(
          *others,
          *others == 1 ? " other gateway shares" : " other gateways share",
          " route \"", name,
          "\"'s storage, and each gateway's lease service keeps its own "
          "locks: through two gateways two callers could hold one lock at "
          "once. A fleet of gateways serves no LEASE-bound domain: bind it "
          "to ETCD or ZOOKEEPER (every gateway following the lock service), "
          "or serve it from one gateway (docs/token-sources.md)"));
      break;
    }
  }
  absl::MutexLock lock(&mu_);
  if (verdict.ok() != verdict_.ok() ||
      (!verdict.ok() && verdict.message() != verdict_.message())) {
    Log(verdict.ok() ? LogSeverity::kInfo : LogSeverity::kWarning,
        verdict.ok()
            ? std::string("no other gateway shares the routes' "
                          "storage: LEASE-bound domains served")
            : absl::StrCat("LEASE-bound domains refused: ", verdict.message()));
  }
  verdict_ = std::move(verdict);
  counted_at_ = started;
}

absl::Status FleetWatch::LeaseServable() const {
  absl::MutexLock lock(&mu_);
  if (!verdict_.ok()) return verdict_;
  const absl::Duration age = absl::Now() - counted_at_;
  if (age > 3 * interval_) {
    return absl::UnavailableError(absl::StrCat(
        "the gateways sharing the routes' storage were last counted ",
        absl::FormatDuration(age),
        " ago, so no LEASE-bound domain is served until they are again"));
  }
  return absl::OkStatus();
}

}  // namespace fencegate
