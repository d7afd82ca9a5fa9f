// Copyright fencegate authors.
//
// MetricsServer: the gateway's metrics -- one prometheus-cpp registry and
// the scrape-time gauges -- served as GET /metrics in the Prometheus text
// format by prometheus-cpp's exposer (--metrics_listen). Components get
// context() and register their own metrics there.
//
// Thread safety: context() and port() are safe from any thread. Scrapes run
// on the exposer's own kThreads threads; a connection that does not send its
// request within kReadTimeout is closed, so clients that stall cannot keep
// the scrapes out for longer.

#ifndef METRICS_METRICS_SERVER_H_
#define METRICS_METRICS_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "metrics/metrics_context.h"
#include "metrics/scrape_gauges.h"
#include "prometheus/registry.h"

namespace prometheus {
class Exposer;
}

namespace fencegate {

class MetricsServer {
 public:
  // Connections served at once; one more waits for a free thread.
  static constexpr int kThreads = 8;
  // How long a connection may take to send its request (or to read the
  // answer) before it is closed: a client that sends half a request holds
  // a thread for this long at most.
  static constexpr absl::Duration kReadTimeout = absl::Seconds(2);

  // Serves on `listen`, "host:port" (port 0 picks a free one).
  // INVALID_ARGUMENT for an address without a port; UNAVAILABLE if it
  // cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& listen);
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;
  // Stops serving; scrapes in progress finish first.
  ~MetricsServer();

  MetricsContext context() const {
    return MetricsContext{registry_.get(), scrape_gauges_.get()};
  }
  // The bound port.
  int port() const { return port_; }

 private:
  MetricsServer() = default;

  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<ScrapeGauges> scrape_gauges_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
};

}  // namespace fencegate

#endif  // METRICS_METRICS_SERVER_H_
