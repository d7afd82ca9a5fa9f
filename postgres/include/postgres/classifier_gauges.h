// Copyright fencegate authors.
//
// The SQL classifier's cache (sql_classifier.h) as scrape-time gauges:
// fencegate_postgres_classifier_cache{size="entries"|"bytes"}, with the
// labels its owner adds (a route's, for an adapter's own classifier; none
// for the gateway's, which both doors share).
//
// Thread safety: as ScrapeGauges.

#ifndef POSTGRES_CLASSIFIER_GAUGES_H_
#define POSTGRES_CLASSIFIER_GAUGES_H_

#include <memory>
#include <vector>

#include "metrics/scrape_gauges.h"
#include "postgres/sql_classifier.h"

namespace fencegate::postgres {

// Adds the gauges to `gauges`; they read `classifier` until the returned
// handles are destroyed (before the classifier).
[[nodiscard]] std::vector<std::shared_ptr<void>> AddClassifierGauges(
    const SqlClassifier& classifier, ScrapeGauges& gauges,
    const prometheus::Labels& labels);

}  // namespace fencegate::postgres

#endif  // POSTGRES_CLASSIFIER_GAUGES_H_
