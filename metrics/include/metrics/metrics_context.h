// Copyright fencegate authors.
//
// MetricsContext: what a component is handed to export its metrics -- the
// gateway's prometheus-cpp registry, and the gauges read at scrape time.
// Storage adapters, token watchers, the fence store, the lease manager and
// the gRPC services get one from the server (in their factory's context or
// their options); none reaches for a global. Without --metrics_listen the
// context is empty and components skip their metrics entirely, so metrics
// cost nothing when off.
//
// Conventions (docs/operations.md, "Metrics"): names start "fencegate_",
// counters end "_total", durations are histograms in seconds, and labels
// are low-cardinality (route, outcome, state, source) -- never a domain or
// a resource.

#ifndef METRICS_METRICS_CONTEXT_H_
#define METRICS_METRICS_CONTEXT_H_

#include "metrics/scrape_gauges.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace fencegate {

struct MetricsContext {
  // Where counters, gauges and histograms are registered. Not owned; it
  // outlives every component. Default: null (metrics off).
  prometheus::Registry* registry = nullptr;
  // Gauges whose values are read when scraped. Not owned. Default: null.
  ScrapeGauges* scrape_gauges = nullptr;

  bool enabled() const { return registry != nullptr; }
};

// Histogram buckets for latencies, in seconds: 100 us to 10 s.
const prometheus::Histogram::BucketBoundaries& LatencyBuckets();

}  // namespace fencegate

#endif  // METRICS_METRICS_CONTEXT_H_
