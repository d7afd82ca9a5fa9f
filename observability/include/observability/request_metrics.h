// Copyright fencegate authors.
//
// RequestMetrics: what the Gateway service counts per request --
// fencegate_writes_total{route,outcome}, fencegate_write_duration_seconds
// {route} and fencegate_fences_total{outcome}. Every route's handles (and
// those of route "none", for a Write refused before its route was known)
// are built at start-up, so a request only increments; with metrics off it
// does nothing at all.
//
// Outcomes: ok; stale (a token below the fence); invalid (a malformed
// request); denied (the policy or token authenticity refused it);
// unavailable (storage or the lock service unreachable, a deadline, a
// cancellation, a limit); error (anything else).
//
// Thread safety: safe for concurrent use after construction.

#ifndef OBSERVABILITY_REQUEST_METRICS_H_
#define OBSERVABILITY_REQUEST_METRICS_H_

#include <array>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "metrics/metrics_context.h"
#include "prometheus/counter.h"
#include "prometheus/histogram.h"

namespace fencegate {

class RequestMetrics {
 public:
  static constexpr std::array<absl::string_view, 7> kOutcomes = {
      "ok", "stale", "invalid", "denied", "unavailable", "error", "conflict"};

  // Metrics off when `metrics` is empty.
  RequestMetrics(const MetricsContext& metrics,
                 const std::vector<std::string>& routes);

  // One finished Write to `route` (empty or unknown: "none").
  void RecordWrite(absl::string_view route, const absl::Status& status,
                   absl::Duration took) const;
  // One finished Fence.
  void RecordFence(const absl::Status& status) const;

  // The outcome label of a status (an index into kOutcomes).
  static size_t OutcomeOf(const absl::Status& status);

 private:
  struct Route {
    std::array<prometheus::Counter*, kOutcomes.size()> outcomes = {};
    prometheus::Histogram* duration = nullptr;
  };
  bool enabled_ = false;
  absl::flat_hash_map<std::string, Route> routes_;
  std::array<prometheus::Counter*, kOutcomes.size()> fences_ = {};
};

}  // namespace fencegate

#endif  // OBSERVABILITY_REQUEST_METRICS_H_
