// Copyright fencegate authors.

#include "metrics/metrics_server.h"

#include <exception>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fencegate/common/host_port.h"
#include "prometheus/exposer.h"

namespace fencegate {

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& listen) {
  if (absl::StatusOr<HostPort> parsed =
          ParseHostPort(listen, "metrics_listen:");
      !parsed.ok()) {
    return parsed.status();
  }
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->registry_ = std::make_shared<prometheus::Registry>();
  server->scrape_gauges_ = std::make_shared<ScrapeGauges>();
  try {
    // civetweb serves one connection per thread, and reads a request for
    // up to request_timeout_ms (30 s by default): with few threads, two
    // clients that send half a request and wait blind every scrape. Enough
    // threads for scrapers and a short read timeout keep it answering.
    server->exposer_ =
        std::make_unique<prometheus::Exposer>(std::vector<std::string>{
            "listening_ports", listen, "num_threads", std::to_string(kThreads),
            "request_timeout_ms",
            std::to_string(absl::ToInt64Milliseconds(kReadTimeout))});
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "metrics_listen: cannot serve on ", listen, ": ", e.what()));
  }
  server->exposer_->RegisterCollectable(server->registry_);
  server->exposer_->RegisterCollectable(server->scrape_gauges_);
  std::vector<int> ports = server->exposer_->GetListeningPorts();
  if (ports.empty()) {
    return absl::UnavailableError(
        absl::StrCat("metrics_listen: cannot serve on ", listen));
  }
  server->port_ = ports.front();
  return server;
}

MetricsServer::~MetricsServer() {
  // The exposer first: no scrape reads the collectables after this.
  exposer_.reset();
}

}  // namespace fencegate
