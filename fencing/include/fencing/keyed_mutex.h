// Copyright fencegate authors.
//
// KeyedMutex: a lock per key (a fencing domain), created on first use and
// dropped when its last holder or waiter leaves, so memory follows the keys
// in use, not every key ever seen. Each key's lock is a flag guarded by
// one mutex, so it is not tied to a thread. A held lock may be moved to another
// thread and released there (a write that completes asynchronously holds
// its domain until its completion runs).

#ifndef FENCING_KEYED_MUTEX_H_
#define FENCING_KEYED_MUTEX_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace fencegate {

// Thread safety: safe for concurrent use.
class KeyedMutex {
 private:
  // Both fields are guarded by KeyedMutex::mu_.
  struct Entry {
    bool held = false;
    int users = 0;  // The holder and the waiters.
  };

 public:
  KeyedMutex() = default;
  KeyedMutex(const KeyedMutex&) = delete;
  KeyedMutex& operator=(const KeyedMutex&) = delete;

  // Holds the key's lock until Release() or destruction, whichever comes
  // first; a moved-from Lock holds nothing. `sync_point`, if not null, is
  // processed after registering as a user and before blocking on the lock.
  class Lock {
   public:
    Lock(KeyedMutex* owner, absl::string_view key,
         const char* sync_point = nullptr);
    ~Lock();
    Lock(Lock&& other) noexcept;
    Lock& operator=(Lock&&) = delete;
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;

    // The key's lock if no one holds it, without waiting; std::nullopt if
    // someone does. It may be taken ahead of a thread already waiting in
    // the constructor (which waits for the lock to be free, not in turn).
    static std::optional<Lock> TryLock(KeyedMutex* owner,
                                       absl::string_view key);

    // Releases the key now, on any thread.
    void Release();

   private:
    // Adopts `entry`, already held and counted as a user.
    Lock(KeyedMutex* owner, std::string key, Entry* entry);

    KeyedMutex* owner_;
    std::string key_;
    Entry* entry_ = nullptr;
  };

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<Entry>> entries_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace fencegate

#endif  // FENCING_KEYED_MUTEX_H_
