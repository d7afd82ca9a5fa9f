// Copyright fencegate authors.

#include "metrics/metrics_context.h"

namespace fencegate {

const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* const kBuckets =
      new prometheus::Histogram::BucketBoundaries{
          0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
          0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
  return *kBuckets;
}

}  // namespace fencegate
