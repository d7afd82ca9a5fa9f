// Copyright fencegate authors.
//
// FleetWatch: whether other gateways share this gateway's routes' storage
// (a fleet), for the domains a policy binds to LEASE. Each gateway's lease
// service keeps its own locks, so through two gateways two callers could
// hold one lock at once; a gateway of a fleet therefore serves no
// LEASE-bound domain (docs/token-sources.md, "Several gateways").
//
// One thread counts, every `interval`, the other gateways present on every
// route whose adapter keeps a presence (StorageAdapter::OtherGateways: the
// PostgreSQL and file adapters). LeaseServable() answers from the last
// count without blocking, and fails closed: a count that failed, or that is
// older than three intervals (a paused process), is UNAVAILABLE.
//
// Thread safety: Start() and Stop() from one thread; LeaseServable() from
// any.

#ifndef GATEWAY_FLEET_WATCH_H_
#define GATEWAY_FLEET_WATCH_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "fencegate/common/periodic_thread.h"
#include "storage_adapters/storage_adapter.h"

namespace fencegate {

class FleetWatch {
 public:
  // `routes` (name, adapter) are not owned and must outlive Stop().
  FleetWatch(std::vector<std::pair<std::string, StorageAdapter*>> routes,
             absl::Duration interval);
  FleetWatch(const FleetWatch&) = delete;
  FleetWatch& operator=(const FleetWatch&) = delete;
  ~FleetWatch();  // Stop().

  // Counts once (blocking), then starts the thread that counts from then
  // on (fg-fleet).
  void Start();
  // Stops and joins the thread.
  void Stop();

  // OK while the last count found no other gateway on any route;
  // FAILED_PRECONDITION naming the route and what to use instead while it
  // found some; UNAVAILABLE if it could not count, or counted too long ago
  // (or not yet). Never blocks.
  absl::Status LeaseServable() const;

  // Counts now, on the calling thread (Start() and the thread do).
  void CountAll();

 private:
  const std::vector<std::pair<std::string, StorageAdapter*>> routes_;
  const absl::Duration interval_;
  mutable absl::Mutex mu_;
  absl::Status verdict_ ABSL_GUARDED_BY(mu_) = absl::UnavailableError(
      "the gateways sharing its storage are not counted yet");
  absl::Time counted_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  PeriodicThread thread_;
};

}  // namespace fencegate

#endif  // GATEWAY_FLEET_WATCH_H_
