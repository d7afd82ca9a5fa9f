// Copyright fencegate authors.

#include "fencegate/common/sync_point.h"

#include <atomic>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace fencegate {
namespace {

struct Registry {
  absl::Mutex mu;
  absl::flat_hash_map<std::string, std::shared_ptr<SyncPoint::Callback>>
      callbacks ABSL_GUARDED_BY(mu);
  // Lets Process() skip the lock entirely while no callback is installed.
  std::atomic<int> count{0};
};

Registry& GetRegistry() {
  static Registry* const registry = new Registry();
  return *registry;
}

}  // namespace

SyncPoint* SyncPoint::Get() {
  static SyncPoint* const instance = new SyncPoint();
  return instance;
}

void SyncPoint::SetCallback(absl::string_view point, Callback cb) {
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  r.callbacks[std::string(point)] = std::make_shared<Callback>(std::move(cb));
  r.count.store(static_cast<int>(r.callbacks.size()));
}

void SyncPoint::ClearCallback(absl::string_view point) {
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  r.callbacks.erase(std::string(point));
  r.count.store(static_cast<int>(r.callbacks.size()));
}

void SyncPoint::ClearAll() {
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  r.callbacks.clear();
  r.count.store(0);
}

void SyncPoint::Process(absl::string_view point, void* arg) {
  Registry& r = GetRegistry();
  if (r.count.load(std::memory_order_relaxed) == 0) return;
  std::shared_ptr<Callback> cb;
  {
    absl::MutexLock lock(&r.mu);
    auto it = r.callbacks.find(point);
    if (it == r.callbacks.end()) return;
    cb = it->second;
  }
  (*cb)(arg);
}

}  // namespace fencegate
