// Copyright fencegate authors.

#include "postgres/classifier_gauges.h"

namespace fencegate::postgres {

std::vector<std::shared_ptr<void>> AddClassifierGauges(
    const SqlClassifier& classifier, ScrapeGauges& gauges,
    const prometheus::Labels& labels) {
  constexpr char kName[] = "fencegate_postgres_classifier_cache";
  constexpr char kHelp[] = "The SQL classifier's cache, by size";
  prometheus::Labels entries = labels;
  entries["size"] = "entries";
  prometheus::Labels bytes = labels;
  bytes["size"] = "bytes";
  std::vector<std::shared_ptr<void>> handles;
  handles.push_back(gauges.Add(kName, kHelp, entries, [&classifier] {
    return static_cast<double>(classifier.counts().entries);
  }));
  handles.push_back(gauges.Add(kName, kHelp, bytes, [&classifier] {
    return static_cast<double>(classifier.counts().bytes);
  }));
  return handles;
}

}  // namespace fencegate::postgres
