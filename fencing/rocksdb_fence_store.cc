// Copyright fencegate authors.

#include "fencing/rocksdb_fence_store.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/base/internal/endian.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "fencegate/v1/lease.pb.h"
#include "fencing/keyed_mutex.h"
#include "fencing/sync_point.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
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

class RocksDbFenceStore final : public RocksDbStore {
 public:
  explicit RocksDbFenceStore(std::unique_ptr<rocksdb::DB> db)
      : db_(std::move(db)) {}

  absl::StatusOr<FenceState> Get(absl::string_view domain) override {
    {
      absl::ReaderMutexLock lock(&cache_mu_);
      auto it = cache_.find(domain);
      if (it != cache_.end()) return it->second;
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
    absl::MutexLock lock(&cache_mu_);
    // A concurrent Raise may have cached a newer value; keep the higher one.
    auto [it, inserted] = cache_.try_emplace(state.domain, state);
    return it->second;
  }

  std::optional<FenceState> GetCached(absl::string_view domain) override {
    absl::ReaderMutexLock lock(&cache_mu_);
    auto it = cache_.find(domain);
    if (it == cache_.end()) return std::nullopt;
    return it->second;
  }

  absl::StatusOr<FenceState> Raise(absl::string_view domain, uint64_t token,
                                   absl::Time at) override {
    KeyedMutex::Lock domain_lock(&domain_locks_, domain);
    absl::StatusOr<FenceState> current = Get(domain);
    if (!current.ok()) return current.status();
    if (token <= current->highest_token) return current;

    rocksdb::WriteOptions write_options;
    write_options.sync = true;  // The WAL is fsynced before Put returns.
    rocksdb::Status s =
        db_->Put(write_options, Key(domain), EncodeValue(token, at));
    FENCEGATE_SYNC_POINT("RocksDbFenceStore::Raise:AfterSync");
    if (!s.ok()) DieOnFailedSync(domain, s);
    FenceState state{std::string(domain), token, at};
    absl::MutexLock lock(&cache_mu_);
    cache_.insert_or_assign(state.domain, state);
    return state;
  }

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
    KeyedMutex::Lock domain_lock(&domain_locks_, lease.name);
    absl::StatusOr<FenceState> current = Get(lease.name);
    if (!current.ok()) return current.status();
    if (lease.token <= current->highest_token) {
      return absl::FailedPreconditionError(absl::StrCat(
          "lease store: token ", lease.token, " for \"", lease.name,
          "\" is not above the fence ", current->highest_token));
    }
    rocksdb::WriteBatch batch;
    batch.Put(Key(lease.name), EncodeValue(lease.token, at));
    batch.Put(LeaseKey(lease.name), EncodeLease(lease));
    rocksdb::WriteOptions write_options;
    write_options.sync = true;
    rocksdb::Status s = db_->Write(write_options, &batch);
    if (!s.ok()) DieOnFailedSync(lease.name, s);
    FenceState state{lease.name, lease.token, at};
    absl::MutexLock lock(&cache_mu_);
    cache_.insert_or_assign(state.domain, state);
    return absl::OkStatus();
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

  // After a failed sync the state on disk is unknown; continuing could serve
  // a fence that a restart rolls back. Crash, as PostgreSQL does on a failed
  // fsync, and let recovery read what is really durable.
  [[noreturn]] static void DieOnFailedSync(absl::string_view domain,
                                           const rocksdb::Status& s) {
    std::fprintf(stderr,
                 "FATAL fence store: cannot make fence of domain \"%.*s\" "
                 "durable: %s\n",
                 static_cast<int>(domain.size()), domain.data(),
                 s.ToString().c_str());
    std::abort();
  }

  const std::unique_ptr<rocksdb::DB> db_;
  // Serializes Raise per domain, so that read-compare-write is atomic while
  // different domains still share RocksDB's group commit.
  KeyedMutex domain_locks_;
  absl::Mutex cache_mu_;
  absl::flat_hash_map<std::string, FenceState> cache_
      ABSL_GUARDED_BY(cache_mu_);
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
  // Many I/O threads raise fences at once, each waiting for one fsync that
  // RocksDB's write group shares. Waiting writers block instead of spinning
  // (spinning took CPU from the group's leader on small machines), and the
  // leader inserts the group's tiny records into the memtable itself
  // instead of waking every writer to insert its own.
  db_options.enable_write_thread_adaptive_yield = false;
  db_options.allow_concurrent_memtable_write = false;
  if (options.env != nullptr) db_options.env = options.env;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(db_options, options.path, &raw);
  if (!s.ok()) {
    return FromRocks(s, absl::StrCat("open ", options.path));
  }
  return std::unique_ptr<RocksDbStore>(
      new RocksDbFenceStore(std::unique_ptr<rocksdb::DB>(raw)));
}

absl::StatusOr<std::unique_ptr<FenceStore>> OpenRocksDbFenceStore(
    const RocksDbFenceStoreOptions& options) {
  absl::StatusOr<std::unique_ptr<RocksDbStore>> store =
      OpenRocksDbStore(options);
  if (!store.ok()) return store.status();
  return std::unique_ptr<FenceStore>(std::move(*store));
}

}  // namespace fencegate
