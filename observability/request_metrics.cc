// Copyright fencegate authors.

#include "observability/request_metrics.h"

#include "fencegate/common/precondition_failed.h"
#include "fencegate/common/seq_out_of_order.h"
#include "fencegate/common/stale_token.h"

namespace fencegate {
namespace {

constexpr char kNoRoute[] = "none";

}  // namespace

RequestMetrics::RequestMetrics(const MetricsContext& metrics,
                               const std::vector<std::string>& routes) {
  if (!metrics.enabled()) return;
  enabled_ = true;
  auto& writes = prometheus::BuildCounter()
                     .Name("fencegate_writes_total")
                     .Help("Writes answered, by route and outcome")
                     .Register(*metrics.registry);
  auto& durations = prometheus::BuildHistogram()
                        .Name("fencegate_write_duration_seconds")
                        .Help("Time from a Write's arrival to its answer")
                        .Register(*metrics.registry);
  std::vector<std::string> names = routes;
  names.push_back(kNoRoute);
  for (const std::string& name : names) {
    Route& route = routes_[name];
    for (size_t i = 0; i < kOutcomes.size(); ++i) {
      route.outcomes[i] = &writes.Add(
          {{"route", name}, {"outcome", std::string(kOutcomes[i])}});
    }
    route.duration = &durations.Add({{"route", name}}, LatencyBuckets());
  }
  auto& fences = prometheus::BuildCounter()
                     .Name("fencegate_fences_total")
                     .Help("Fence calls answered, by outcome")
                     .Register(*metrics.registry);
  for (size_t i = 0; i < kOutcomes.size(); ++i) {
    fences_[i] = &fences.Add({{"outcome", std::string(kOutcomes[i])}});
  }
}

size_t RequestMetrics::OutcomeOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 0;
    case absl::StatusCode::kFailedPrecondition:
      if (GetStaleToken(status).has_value()) return 1;
      // Admitted by the fence, refused by the storage's state: what
      // optimistic concurrency expects now and then, not an error.
      if (GetPreconditionFailed(status).has_value() ||
          GetSeqOutOfOrder(status).has_value()) {
        return 6;
      }
      return 5;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return 2;
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
      return 3;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kResourceExhausted:
      return 4;
    default:
      return 5;
  }
}

void RequestMetrics::RecordWrite(absl::string_view route,
                                 const absl::Status& status,
                                 absl::Duration took) const {
  if (!enabled_) return;
  auto it = routes_.find(route);
  if (it == routes_.end()) it = routes_.find(kNoRoute);
  it->second.outcomes[OutcomeOf(status)]->Increment();
  it->second.duration->Observe(absl::ToDoubleSeconds(took));
}

void RequestMetrics::RecordFence(const absl::Status& status) const {
  if (!enabled_) return;
  fences_[OutcomeOf(status)]->Increment();
}

}  // namespace fencegate
