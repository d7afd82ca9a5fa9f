// Copyright fencegate authors.

#include "metrics/scrape_gauges.h"

#include <utility>

#include "absl/container/flat_hash_map.h"

namespace fencegate {

std::shared_ptr<void> ScrapeGauges::Add(std::string name, std::string help,
                                        prometheus::Labels labels, Read read) {
  uint64_t id;
  {
    absl::MutexLock lock(&mu_);
    id = next_id_++;
    samples_.emplace(id, Sample{std::move(name), std::move(help),
                                std::move(labels), std::move(read)});
  }
  // The handle's deleter removes the sample; the handle holds no object.
  return std::shared_ptr<void>(nullptr, [this, id](void*) { Remove(id); });
}

void ScrapeGauges::Remove(uint64_t id) {
  absl::MutexLock lock(&mu_);
  samples_.erase(id);
}

std::vector<prometheus::MetricFamily> ScrapeGauges::Collect() const {
  std::vector<prometheus::MetricFamily> families;
  absl::flat_hash_map<std::string, size_t> index;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, sample] : samples_) {
    auto [it, inserted] = index.try_emplace(sample.name, families.size());
    if (inserted) {
      prometheus::MetricFamily family;
      family.name = sample.name;
      family.help = sample.help;
      family.type = prometheus::MetricType::Gauge;
      families.push_back(std::move(family));
    }
    prometheus::ClientMetric metric;
    for (const auto& [key, value] : sample.labels) {
      metric.label.push_back({key, value});
    }
    metric.gauge.value = sample.read();
    families[it->second].metric.push_back(std::move(metric));
  }
  return families;
}

}  // namespace fencegate
