// Copyright fencegate authors.
//
// The RocksDB-backed FenceStore and LeaseStore: one key per domain ("d/")
// and per granted lease ("l/"). One commit thread writes every fence rise:
// the rises queued while its previous write synced go out as one batch
// with one synced WAL write, and are reported (RaiseAsync's callbacks run
// on that thread) only after it. RaiseAsyncNeverBlocks() is true. Fences
// read or written are cached in memory, up to max_cached_domains; the cache
// never holds a fence lower than the one on disk.

#ifndef FENCING_ROCKSDB_FENCE_STORE_H_
#define FENCING_ROCKSDB_FENCE_STORE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "fencing/fence_store.h"
#include "fencing/lease_store.h"
#include "metrics/metrics_context.h"

namespace rocksdb {
class Env;
}

namespace fencegate {

struct RocksDbFenceStoreOptions {
  // Directory of the RocksDB database; created if missing.
  // Default: none (required).
  std::string path;

  // RocksDB Env to use, for fault injection in tests. Not owned; must
  // outlive the store.
  // Default: nullptr (the default Env).
  rocksdb::Env* env = nullptr;

  // Fences kept in memory. When it is full the cache is emptied, and each
  // domain is read from RocksDB again when next used: memory stays bounded
  // however many domains there are, at the cost of a read per domain after
  // each emptying. At least 1.
  // Default: 100000.
  size_t max_cached_domains = 100000;

  // RocksDB's memtable size (two at most exist) and block cache, which
  // also holds the index and filter blocks: with the cache above, the
  // store's memory is bounded by these. Default: 16 MiB, 32 MiB.
  size_t write_buffer_bytes = 16 << 20;
  size_t block_cache_bytes = 32 << 20;

  // File descriptors held in reserve for RocksDB: when the process has
  // none left (clients' connections took them), opening the store's next
  // file (a new write-ahead log, a table) uses one of these instead of
  // failing, which would stop the process. Default: 16.
  int reserved_fds = 16;
  // Where the store exports fencegate_fence_store_sync_duration_seconds
  // (each synced WAL write), fencegate_fence_advances_total (each durable
  // rise, from any path) and fencegate_domains (domains in the store,
  // counted once at open when metrics are on). Default: metrics off.
  MetricsContext metrics;
};

// Both stores over one database; a grant and its fence rise are one write.
class RocksDbStore : public FenceStore, public LeaseStore {};

// Opens (creating if missing) the store at options.path.
// Errors: INVALID_ARGUMENT for an empty path; UNAVAILABLE if the database
// cannot be opened (e.g. another process holds its lock, or a disk error);
// DATA_LOSS if a stored value is corrupt.
absl::StatusOr<std::unique_ptr<RocksDbStore>> OpenRocksDbStore(
    const RocksDbFenceStoreOptions& options);

// OpenRocksDbStore, for callers that need only the fences.
absl::StatusOr<std::unique_ptr<FenceStore>> OpenRocksDbFenceStore(
    const RocksDbFenceStoreOptions& options);

}  // namespace fencegate

#endif  // FENCING_ROCKSDB_FENCE_STORE_H_
