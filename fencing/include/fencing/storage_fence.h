// Copyright fencegate authors.
//
// StorageFence: the fences that the storage behind a gateway keeps itself
// (docs/fencing.md, "The fence in the storage"): the PostgreSQL fence
// table, a file root's fence records. Another gateway writing to the same
// storage, or a gateway whose own fence store was lost, meets them there.
// The Fencer raises them with its own fence wherever a fence moves without a
// write: a Fence call, a watcher's handover, a lease grant or a Sequence.

#ifndef FENCING_STORAGE_FENCE_H_
#define FENCING_STORAGE_FENCE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fencegate {

// Thread safety: implementations are safe for concurrent use; the Fencer
// calls them for one domain at a time, in the domain's turn. Every call
// may block (network, disk): never from an RPC thread.
class StorageFence {
 public:
  StorageFence() = default;
  StorageFence(const StorageFence&) = delete;
  StorageFence& operator=(const StorageFence&) = delete;
  virtual ~StorageFence() = default;

  // Raises `domain`'s fence in every storage that keeps one to `token`, or
  // keeps it where it is equal, each once the writes of lower tokens it is
  // running have ended. OK once every one holds `token` durably. The
  // stale-token error (common/stale_token.h), holding the highest token
  // met, if a storage holds a higher one (those after it are not tried);
  // UNAVAILABLE naming the storage that could not be reached (those before
  // it were raised).
  virtual absl::Status Raise(absl::string_view domain, uint64_t token) = 0;

  // INVALID_ARGUMENT, naming the storage, if a storage that keeps fences
  // cannot hold `token` (PostgreSQL's bigint ends at 2^63-1): the Fencer
  // asks before any fence moves, so that a token that would be refused
  // there moves none. Never blocks.
  virtual absl::Status CheckToken(uint64_t token) const = 0;

  // The highest fence of `domain` that any storage keeps (0 if none), read
  // by the gateway itself. UNAVAILABLE naming a storage that could not be
  // reached.
  virtual absl::StatusOr<uint64_t> Read(absl::string_view domain) = 0;

  // A token for `domain` that is at least `at_least` and above the fence of
  // every storage that keeps one, raised durably in all of them; no other
  // caller of Next() on the same storage, in this process or another,
  // receives it. UNAVAILABLE as Raise(); OUT_OF_RANGE past the highest
  // token a storage can hold.
  virtual absl::StatusOr<uint64_t> Next(absl::string_view domain,
                                        uint64_t at_least) = 0;
};

}  // namespace fencegate

#endif  // FENCING_STORAGE_FENCE_H_
