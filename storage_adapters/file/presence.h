// Copyright fencegate authors.
//
// FilePresence: this gateway's presence in a file root, and the count of
// the other gateways present (StorageAdapter::OtherGateways), for the fleet
// check of LEASE-bound domains (gateway/fleet_watch.h).
//
// Each route of a gateway holds an exclusive flock on a file of its own in
// <root>/.fencegate/gateways/, named "<instance>-<16 random hex digits>"
// (the instance: GatewayInstanceId()); the lock goes with the process
// (even after kill -9), and a paused process keeps it. Counting tries a
// shared lock on every file there of another instance: one that cannot be
// taken is a live gateway's (counted once per instance); one that can is a
// dead one's, and is removed. A file is locked before it is renamed to its
// name, so a live gateway's file is never found unlocked under its name;
// under its first name (a leading dot) it is, for a moment, and a count
// then removes it and the gateway makes another.
//
// Thread safety: safe for concurrent use.

#ifndef STORAGE_ADAPTERS_FILE_PRESENCE_H_
#define STORAGE_ADAPTERS_FILE_PRESENCE_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace fencegate {

class FilePresence {
 public:
  // `dir`: the directory of the presence files (created when first
  // counted); `instance`: this gateway's (GatewayInstanceId()).
  FilePresence(std::string dir, std::string instance);
  FilePresence(const FilePresence&) = delete;
  FilePresence& operator=(const FilePresence&) = delete;
  // Removes this gateway's file.
  ~FilePresence();

  // Makes this gateway present (at the first call), then counts the
  // others. UNAVAILABLE if the directory cannot be written or read.
  absl::StatusOr<int> Others();

 private:
  absl::Status BePresentLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string dir_;
  const std::string instance_;
  absl::Mutex mu_;
  std::string mine_ ABSL_GUARDED_BY(mu_);  // The file's name, once present.
  int fd_ ABSL_GUARDED_BY(mu_) = -1;       // Holds the exclusive lock.
};

}  // namespace fencegate

#endif  // STORAGE_ADAPTERS_FILE_PRESENCE_H_
