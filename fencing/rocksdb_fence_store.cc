// Copyright fencegate authors.

#include "fencing/rocksdb_fence_store.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/internal/endian.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "fencegate/common/fatal.h"
#include "fencegate/common/sync_point.h"
#include "fencegate/common/thread_name.h"
#include "fencegate/v1/lease.pb.h"
#include "fencing/reserve_fs.h"
#include "prometheus/counter.h"
#include "prometheus/histogram.h"
#include "rocksdb/cache.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"
#include "rocksdb/options.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"

namespace fencegate {
namespace {

// Key: "d/" + domain. Value: version byte 1, then the token and the advance
// time in microseconds since the Unix epoch, both big-endian 64-bit.
constexpr char kKeyPrefix[] = "d/";
// Lease records: "l/" + name -> fencegate.v1.StoredLease.
constexpr char kLeasePrefix[] = "l/";
constexpr char kValueVersion = 1;
constexpr size_t kValueSize = 17;

std::string EncodeValue(uint64_t token, absl::Time at) {
  std::string value(kValueSize, '\0');
  value[0] = kValueVersion;
  absl::big_endian::Store64(value.data() + 1, token);
  absl::big_endian::Store64(value.data() + 9,
                            static_cast<uint64_t>(absl::ToUnixMicros(at)));
  return value;
}

absl::Status DecodeValue(absl::string_view domain, absl::string_view value,
                         FenceState* state) {
  if (value.size() != kValueSize || value[0] != kValueVersion) {
    return absl::DataLossError(
        absl::StrCat("fence store: corrupt value for domain \"", domain, "\" (",
                     value.size(), " bytes)"));
  }
  state->highest_token = absl::big_endian::Load64(value.data() + 1);
  state->advanced_at = absl::FromUnixMicros(
      static_cast<int64_t>(absl::big_endian::Load64(value.data() + 9)));
  return absl::OkStatus();
}

absl::Status FromRocks(const rocksdb::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  std::string msg = absl::StrCat("fence store: ", what, ": ", s.ToString());
  if (s.IsCorruption()) return absl::DataLossError(msg);
  if (s.IsInvalidArgument()) return absl::InvalidArgumentError(msg);
  return absl::UnavailableError(msg);
}

// Every write of a fence key goes through one commit thread: Raise(),
// RaiseAsync() and GrantLease() queue a rise, and the thread takes all the
// rises queued while it was busy, decides each against the fence before it
// (the group's own earlier rises included), writes the group as one batch
// with one synced WAL write, updates the cache, and then reports to each
// caller in queue order. One fsync thus serves every rise that arrived
// during the previous one, however many threads or none are waiting, and
// the single writer makes each read-compare-write atomic.
class RocksDbFenceStore final : public RocksDbStore {
 public:
  RocksDbFenceStore(std::unique_ptr<rocksdb::Env> env,
                    std::unique_ptr<rocksdb::DB> db, size_t max_cached)
      : env_(std::move(env)),
        db_(std::move(db)),
        max_cached_(std::max<size_t>(1, max_cached)) {}

  // Registers the store's metrics; before Start().
  void ExportMetrics(const MetricsContext& metrics) {
    if (!metrics.enabled()) return;
    sync_seconds_ = &prometheus::BuildHistogram()
                         .Name("fencegate_fence_store_sync_duration_seconds")
                         .Help("Synced WAL writes of the fence store")
                         .Register(*metrics.registry)
                         .Add({}, LatencyBuckets());
    advances_ = &prometheus::BuildCounter()
                     .Name("fencegate_fence_advances_total")
                     .Help("Fences raised durably, from any path")
                     .Register(*metrics.registry)
                     .Add({});
    // Counted once here, then kept up to date by the commit thread.
    std::unique_ptr<rocksdb::Iterator> it(
        db_->NewIterator(rocksdb::ReadOptions()));
    int64_t domains = 0;
    for (it->Seek(kKeyPrefix); it->Valid() && it->key().starts_with(kKeyPrefix);
         it->Next()) {
      ++domains;
    }
    domains_ = domains;
    domains_gauge_ = metrics.scrape_gauges->Add(
        "fencegate_domains", "Domains in the fence store", {},
        [this] { return static_cast<double>(domains_.load()); });
  }

  // Commits and reports every queued rise before returning. Users must be
  // done with the store: a rise queued once the commit thread has exited
  // aborts the process (nothing could ever report it).
  ~RocksDbFenceStore() override {
    {
      absl::MutexLock lock(&queue_mu_);
      stopping_ = true;
    }
    if (committer_.joinable()) committer_.join();
  }

  absl::Status Start() {
    try {
      committer_ = std::thread([this] { CommitLoop(); });
    } catch (const std::exception& e) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "fence store: cannot start its commit thread: ", e.what()));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<FenceState> Get(absl::string_view domain) override {
    uint64_t evictions = 0;
    {
      absl::ReaderMutexLock lock(&cache_mu_);
      auto it = cache_.find(domain);
      if (it != cache_.end()) return it->second;
      evictions = evictions_;
    }
    FenceState state;
    state.domain = std::string(domain);
    std::string value;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), Key(domain), &value);
    if (s.IsNotFound()) return state;  // Never fenced: not cached.
    if (absl::Status st = FromRocks(s, "read"); !st.ok()) return st;
    if (absl::Status st = DecodeValue(domain, value, &state); !st.ok()) {
      return st;
    }
    FENCEGATE_SYNC_POINT("RocksDbFenceStore::Get:AfterRead");
    absl::MutexLock lock(&cache_mu_);
    // A concurrent commit may have cached a newer value; keep the higher one.
    if (auto it = cache_.find(state.domain); it != cache_.end()) {
      return it->second;
    }
    // A commit newer than what was read may have been cached and dropped
    // again meanwhile: caching the older value then would let a stale token
    // pass. Only cache what was read if nothing was dropped since.
    if (evictions_ != evictions) return state;
    CacheLocked(state);
    return state;
  }

  // Caches `state`, first emptying the cache if it is full. (Dropping
  // everything is simple and fair to every domain; the domains in use are
  // read back from RocksDB's block cache as they come.)
  void CacheLocked(const FenceState& state)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(cache_mu_) {
    if (cache_.size() >= max_cached_ && !cache_.contains(state.domain)) {
      cache_.clear();
      ++evictions_;
    }
    cache_.insert_or_assign(state.domain, state);
  }

  std::optional<FenceState> GetCached(absl::string_view domain) override {
    absl::ReaderMutexLock lock(&cache_mu_);
    auto it = cache_.find(domain);
    if (it == cache_.end()) return std::nullopt;
    return it->second;
  }

  absl::StatusOr<FenceState> Raise(absl::string_view domain, uint64_t token,
                                   absl::Time at) override {
    if (std::optional<FenceState> cached = GetCached(domain);
        cached.has_value() && token <= cached->highest_token) {
      return *std::move(cached);  // The cache only rises: nothing to write.
    }
    absl::StatusOr<FenceState> out;
    Wait([&](absl::Notification* n) {
      Enqueue(PendingRaise{std::string(domain), token, at, std::nullopt,
                           [&out, n](absl::StatusOr<FenceState> r) {
                             out = std::move(r);
                             n->Notify();
                           }});
    });
    return out;
  }

  void RaiseAsync(absl::string_view domain, uint64_t token, absl::Time at,
                  RaiseCallback done) override {
    Enqueue(PendingRaise{std::string(domain), token, at, std::nullopt,
                         std::move(done)});
  }

  bool RaiseAsyncNeverBlocks() const override { return true; }

  absl::StatusOr<std::vector<LeaseRecord>> LoadLeases() override {
    std::vector<LeaseRecord> leases;
    std::unique_ptr<rocksdb::Iterator> it(
        db_->NewIterator(rocksdb::ReadOptions()));
    for (it->Seek(kLeasePrefix);
         it->Valid() && it->key().starts_with(kLeasePrefix); it->Next()) {
      v1::StoredLease stored;
      std::string name = it->key().ToString().substr(strlen(kLeasePrefix));
      if (!stored.ParseFromArray(it->value().data(),
                                 static_cast<int>(it->value().size()))) {
        return absl::DataLossError(
            absl::StrCat("lease store: corrupt lease of \"", name, "\""));
      }
      leases.push_back(
          LeaseRecord{name, stored.lease_id(), stored.owner(), stored.token(),
                      absl::Milliseconds(stored.ttl_ms()),
                      absl::FromUnixMicros(stored.expires_unix_micros())});
    }
    if (absl::Status s = FromRocks(it->status(), "scan leases"); !s.ok()) {
      return s;
    }
    return leases;
  }

  absl::Status GrantLease(const LeaseRecord& lease, absl::Time at) override {
    absl::Status out;
    Wait([&](absl::Notification* n) {
      Enqueue(PendingRaise{lease.name, lease.token, at, EncodeLease(lease),
                           [&out, n](absl::StatusOr<FenceState> r) {
                             out = r.status();
                             n->Notify();
                           }});
    });
    return out;
  }

  absl::Status RenewLease(const LeaseRecord& lease) override {
    return FromRocks(db_->Put(rocksdb::WriteOptions(), LeaseKey(lease.name),
                              EncodeLease(lease)),
                     "renew lease");
  }

  absl::Status RemoveLease(absl::string_view name) override {
    return FromRocks(db_->Delete(rocksdb::WriteOptions(), LeaseKey(name)),
                     "remove lease");
  }

 private:
  // A queued rise. With `lease`, a grant: the token must rise above the
  // fence (FAILED_PRECONDITION otherwise), and the lease record is written
  // in the same batch.
  struct PendingRaise {
    std::string domain;
    uint64_t token = 0;
    absl::Time at;
    std::optional<std::string> lease;
    RaiseCallback done;
  };

  static std::string Key(absl::string_view domain) {
    return absl::StrCat(kKeyPrefix, domain);
  }
  static std::string LeaseKey(absl::string_view name) {
    return absl::StrCat(kLeasePrefix, name);
  }
  static std::string EncodeLease(const LeaseRecord& lease) {
    v1::StoredLease stored;
    stored.set_lease_id(lease.lease_id);
    stored.set_owner(lease.owner);
    stored.set_token(lease.token);
    stored.set_ttl_ms(
        static_cast<uint32_t>(absl::ToInt64Milliseconds(lease.ttl)));
    stored.set_expires_unix_micros(absl::ToUnixMicros(lease.expires_at));
    return stored.SerializeAsString();
  }

  // Runs `enqueue` with a notification and waits for it. Called from the
  // commit thread (a callback that raises), it would wait forever: abort.
  void Wait(absl::FunctionRef<void(absl::Notification*)> enqueue) {
    if (std::this_thread::get_id() == committer_.get_id()) {
      Fatal("fence store",
            "a rise's callback waited for another rise on the commit thread");
    }
    absl::Notification n;
    enqueue(&n);
    n.WaitForNotification();
  }

  void Enqueue(PendingRaise raise) {
    {
      absl::MutexLock lock(&queue_mu_);
      if (committer_exited_) {
        // The store is being destroyed while still in use: nothing would
        // ever report this rise, and its caller would wait forever.
        Fatal("fence store", absl::StrCat("a rise of domain \"", raise.domain,
                                          "\" was queued after the store "
                                          "closed"));
      }
      queue_.push_back(std::move(raise));
    }
    FENCEGATE_SYNC_POINT("RocksDbFenceStore::Enqueue:Queued");
  }

  void CommitLoop() {
    NameThisThread("fence-commit");  // For top -H, perf.
    std::vector<PendingRaise> group;
    for (;;) {
      {
        absl::MutexLock lock(&queue_mu_);
        queue_mu_.Await(absl::Condition(
            +[](RocksDbFenceStore* self)
                 ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->queue_mu_) {
                   return !self->queue_.empty() || self->stopping_;
                 },
            this));
        if (queue_.empty()) {  // Stopping, with nothing left.
          committer_exited_ = true;
          return;
        }
        group.swap(queue_);
      }
      CommitGroup(group);
      group.clear();
    }
  }

  // Decides, writes, syncs and reports one group, in queue order.
  void CommitGroup(std::vector<PendingRaise>& group) {
    std::vector<absl::StatusOr<FenceState>> results;
    results.reserve(group.size());
    // The group's own rises so far: a later rise of a domain is decided
    // against them, not against the older cache.
    absl::flat_hash_map<absl::string_view, FenceState> raised;
    rocksdb::WriteBatch batch;
    int64_t new_domains = 0;
    uint64_t rises = 0;
    for (PendingRaise& r : group) {
      absl::StatusOr<FenceState> current;
      if (auto it = raised.find(r.domain); it != raised.end()) {
        current = it->second;
      } else {
        current = Get(r.domain);
      }
      if (!current.ok() || r.token <= current->highest_token) {
        if (current.ok() && r.lease.has_value()) {
          current = absl::FailedPreconditionError(absl::StrCat(
              "lease store: token ", r.token, " for \"", r.domain,
              "\" is not above the fence ", current->highest_token));
        }
        results.push_back(std::move(current));
        continue;
      }
      batch.Put(Key(r.domain), EncodeValue(r.token, r.at));
      if (r.lease.has_value()) batch.Put(LeaseKey(r.domain), *r.lease);
      if (current->advanced_at == absl::InfinitePast()) ++new_domains;
      FenceState state{r.domain, r.token, r.at};
      raised.insert_or_assign(r.domain, state);
      results.push_back(std::move(state));
      ++rises;
    }
    if (!raised.empty()) {
      FENCEGATE_SYNC_POINT("RocksDbFenceStore::Commit:BeforeWrite");
      rocksdb::WriteOptions write_options;
      write_options.sync = true;  // The WAL is fsynced before Write returns.
      const absl::Time sync_start = absl::Now();
      rocksdb::Status s = db_->Write(write_options, &batch);
      if (sync_seconds_ != nullptr) {
        sync_seconds_->Observe(absl::ToDoubleSeconds(absl::Now() - sync_start));
        advances_->Increment(static_cast<double>(rises));
        domains_ += new_domains;
      }
      FENCEGATE_SYNC_POINT("RocksDbFenceStore::Raise:AfterSync");
      if (!s.ok()) DieOnFailedSync(raised.begin()->first, raised.size(), s);
      absl::MutexLock lock(&cache_mu_);
      for (const auto& [domain, state] : raised) CacheLocked(state);
    }
    for (size_t i = 0; i < group.size(); ++i) {
      std::move(group[i].done)(std::move(results[i]));
    }
  }

  // After a failed sync the state on disk is unknown; continuing could serve
  // a fence that a restart rolls back. Crash, as PostgreSQL does on a failed
  // fsync, and let recovery read what is really durable.
  [[noreturn]] static void DieOnFailedSync(absl::string_view domain,
                                           size_t domains,
                                           const rocksdb::Status& s) {
    Fatal("fence store",
          absl::StrCat(
              "cannot make fence of domain \"", domain, "\"",
              domains > 1 ? absl::StrCat(" (and ", domains - 1, " more)") : "",
              " durable: ", s.ToString()));
  }

  // Metrics; null when off.
  prometheus::Histogram* sync_seconds_ = nullptr;
  prometheus::Counter* advances_ = nullptr;
  std::atomic<int64_t> domains_{0};
  std::shared_ptr<void> domains_gauge_;
  // The database's Env (over ReserveFs); outlives it.
  const std::unique_ptr<rocksdb::Env> env_;
  const std::unique_ptr<rocksdb::DB> db_;
  const size_t max_cached_;
  absl::Mutex cache_mu_;
  absl::flat_hash_map<std::string, FenceState> cache_
      ABSL_GUARDED_BY(cache_mu_);
  // How many times entries were dropped from cache_.
  uint64_t evictions_ ABSL_GUARDED_BY(cache_mu_) = 0;
  absl::Mutex queue_mu_;
  std::vector<PendingRaise> queue_ ABSL_GUARDED_BY(queue_mu_);
  bool stopping_ ABSL_GUARDED_BY(queue_mu_) = false;
  bool committer_exited_ ABSL_GUARDED_BY(queue_mu_) = false;
  std::thread committer_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<RocksDbStore>> OpenRocksDbStore(
    const RocksDbFenceStoreOptions& options) {
  if (options.path.empty()) {
    return absl::InvalidArgumentError("fence store: path must not be empty");
  }
  rocksdb::Options db_options;
  db_options.create_if_missing = true;
  db_options.paranoid_checks = true;
  // Recover every synced write; stop at the first torn record.
  db_options.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  // Fence rises come from one commit thread, in batches; lease renewals
  // and removals from other threads. Writers waiting for another's write
  // block instead of spinning (spinning took CPU from the writing thread on
  // small machines), and the leader of a write group inserts the group's
  // records into the memtable itself. (inplace_update_support would keep
  // one memtable entry per domain, but then the memtable would never fill,
  // never flush, and the WAL would grow without end.)
  db_options.enable_write_thread_adaptive_yield = false;
  db_options.allow_concurrent_memtable_write = false;
  // Descriptors kept in reserve, so that RocksDB can always open its next
  // file however many connections clients hold (reserve_fs.h).
  std::shared_ptr<rocksdb::FileSystem> base_fs =
      options.env != nullptr ? options.env->GetFileSystem()
                             : rocksdb::FileSystem::Default();
  std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(
      std::make_shared<ReserveFs>(std::move(base_fs), options.reserved_fds));
  db_options.env = env.get();
  // Bounded memory: small memtables, and one block cache that also holds
  // index and filter blocks (else they stay in memory, one per table file).
  db_options.write_buffer_size = options.write_buffer_bytes;
  db_options.max_write_buffer_number = 2;
  rocksdb::BlockBasedTableOptions table_options;
  table_options.block_cache = rocksdb::NewLRUCache(options.block_cache_bytes);
  table_options.cache_index_and_filter_blocks = true;
  table_options.pin_l0_filter_and_index_blocks_in_cache = true;
  db_options.table_factory.reset(
      rocksdb::NewBlockBasedTableFactory(table_options));
  rocksdb::DB* raw = nullptr;
  const std::vector<pid_t> unnamed = UnnamedThreads();
  rocksdb::Status s = rocksdb::DB::Open(db_options, options.path, &raw);
  if (!s.ok()) {
    return FromRocks(s, absl::StrCat("open ", options.path));
  }
  // RocksDB 7.8 names its background threads but not its timer (which
  // flushes the info log and dumps stats): named here.
  for (pid_t tid : UnnamedThreads()) {
    if (std::find(unnamed.begin(), unnamed.end(), tid) == unnamed.end()) {
      NameThread(tid, "rocksdb:timer");
    }
  }
  auto store = std::make_unique<RocksDbFenceStore>(
      std::move(env), std::unique_ptr<rocksdb::DB>(raw),
      options.max_cached_domains);
  store->ExportMetrics(options.metrics);
  if (absl::Status started = store->Start(); !started.ok()) return started;
  return std::unique_ptr<RocksDbStore>(std::move(store));
}

absl::StatusOr<std::unique_ptr<FenceStore>> OpenRocksDbFenceStore(
    const RocksDbFenceStoreOptions& options) {
  absl::StatusOr<std::unique_ptr<RocksDbStore>> store =
      OpenRocksDbStore(options);
  if (!store.ok()) return store.status();
  return std::unique_ptr<FenceStore>(std::move(*store));
}

}  // namespace fencegate
