// Copyright fencegate authors.
//
// LeaseStore: durable records of the built-in lease service's granted
// leases, kept in the same database as the fences so that a grant and the
// fence advance it implies are one durable write.

#ifndef FENCING_LEASE_STORE_H_
#define FENCING_LEASE_STORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace fencegate {

struct LeaseRecord {
  // The lock's name, which is also its fencing domain.
  std::string name;
  // Secret handle of the holding.
  std::string lease_id;
  std::string owner;
  uint64_t token = 0;
  absl::Duration ttl;
  // Wall-clock expiry; survives restarts.
  absl::Time expires_at;
};

// Thread safety: safe for concurrent use.
class LeaseStore {
 public:
  LeaseStore() = default;
  LeaseStore(const LeaseStore&) = delete;
  LeaseStore& operator=(const LeaseStore&) = delete;
  virtual ~LeaseStore() = default;

  // Every stored lease, expired or not. DATA_LOSS for a corrupt record.
  virtual absl::StatusOr<std::vector<LeaseRecord>> LoadLeases() = 0;

  // In one synced write: stores `lease` and raises the fence of domain
  // lease.name to lease.token (recording `at`). FAILED_PRECONDITION if the
  // fence is already at or above lease.token (nothing written). Like
  // FenceStore::Raise, a failure to make the write durable is fatal.
  virtual absl::Status GrantLease(const LeaseRecord& lease, absl::Time at) = 0;

  // Stores the renewed lease. Not synced: losing a renewal in a crash only
  // makes the lease expire earlier, which fencing makes safe.
  virtual absl::Status RenewLease(const LeaseRecord& lease) = 0;

  // Deletes the lease of `name`. Not synced, for the same reason.
  virtual absl::Status RemoveLease(absl::string_view name) = 0;
};

}  // namespace fencegate

#endif  // FENCING_LEASE_STORE_H_
