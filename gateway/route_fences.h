// Copyright fencegate authors.
//
// RouteFences: the StorageFence (fencing/storage_fence.h) of a gateway's
// routes. Every route whose adapter keeps fences in its storage
// (StorageAdapter::KeepsFences: PostgreSQL routes) takes part, for every
// domain: a gateway cannot know which routes another gateway writes a
// domain to, so a Fence, a lease grant or a Sequence reaches them all
// (docs/fencing.md, "The fence in the storage"). A route that cannot be
// reached fails the call with UNAVAILABLE naming it.
//
// Next() takes its token from the first such route by name (the arbiter:
// its storage hands every token out once) and raises the others to it; if
// one of them already holds a higher token, it asks the arbiter again above
// that, a few times at most.
//
// Recover() runs once before the gateway serves: it raises the gateway's
// own fences to what each route's storage holds.

#ifndef GATEWAY_ROUTE_FENCES_H_
#define GATEWAY_ROUTE_FENCES_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "fencing/clock.h"
#include "fencing/fence_store.h"
#include "fencing/storage_fence.h"
#include "storage_adapters/router.h"

namespace fencegate {

// Thread safety: safe for concurrent use (the adapters are).
class RouteFences final : public StorageFence {
 public:
  // `router` must outlive this object.
  explicit RouteFences(const Router& router);

  // True if no route keeps fences: every call then does nothing.
  bool empty() const { return routes_.empty(); }

  absl::Status Raise(absl::string_view domain, uint64_t token) override;
  absl::Status CheckToken(uint64_t token) const override;
  absl::StatusOr<uint64_t> Read(absl::string_view domain) override;
  absl::StatusOr<uint64_t> Next(absl::string_view domain,
                                uint64_t at_least) override;

  // Reads every route's fences and raises `store`'s to them (never lowers
  // one). Returns one line per route for the log: how many domains its
  // storage holds, and how many of this store's fences were behind it
  // (missing, or lower: a fence store lost or restored from an older copy)
  // -- as warnings. A route that cannot be reached (UNAVAILABLE) is
  // reported and skipped: its storage still refuses stale writes itself.
  // Any other error ends the recovery with that error, prefixed with the
  // route's name: the gateway must not serve with fences it could not read.
  struct Line {
    bool warning = false;
    std::string text;
  };
  absl::StatusOr<std::vector<Line>> Recover(FenceStore& store, Clock& clock);

 private:
  std::vector<std::pair<std::string, StorageAdapter*>> routes_;
};

}  // namespace fencegate

#endif  // GATEWAY_ROUTE_FENCES_H_
