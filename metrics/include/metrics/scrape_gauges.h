// Copyright fencegate authors.
//
// ScrapeGauges: gauges whose values are read when /metrics is scraped
// rather than kept up to date on a hot path -- a pool's idle connections,
// the leases held, whether a watcher is connected. A prometheus-cpp
// Collectable, registered with the exposer beside the registry.
//
// Thread safety: safe for concurrent use. Collect() calls each reader with
// the gauges' lock held, so a reader must be thread safe, must not block
// and must not call back into ScrapeGauges.

#ifndef METRICS_SCRAPE_GAUGES_H_
#define METRICS_SCRAPE_GAUGES_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/collectable.h"
#include "prometheus/labels.h"
#include "prometheus/metric_family.h"

namespace fencegate {

class ScrapeGauges final : public prometheus::Collectable {
 public:
  using Read = std::function<double()>;

  // Keeps the gauge sample `name`{`labels`} = read() until the returned
  // handle is destroyed (destroy it before what `read` uses). Samples of
  // one name share its `help`.
  [[nodiscard]] std::shared_ptr<void> Add(std::string name, std::string help,
                                          prometheus::Labels labels, Read read);

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  struct Sample {
    std::string name;
    std::string help;
    prometheus::Labels labels;
    Read read;
  };
  void Remove(uint64_t id);

  mutable absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, Sample> samples_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fencegate

#endif  // METRICS_SCRAPE_GAUGES_H_
