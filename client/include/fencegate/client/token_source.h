// Copyright fencegate authors.
//
// TokenSource: where a worker gets a lock and the fencing token that goes
// with it. Implementations: the gateway's built-in lease service
// (client/lease_token_source.h) and etcd (client/etcd/etcd_token_source.h).
//
// A held lock is kept alive in the background until it is released or its
// HeldLock is destroyed. If keep-alive fails or the lease ends, `on_lost`
// runs once, on a background thread, and lost() turns true: the worker
// must stop writing. Its later writes are refused by the gateway anyway,
// once a new holder's token is in the fence.

#ifndef CLIENT_TOKEN_SOURCE_H_
#define CLIENT_TOKEN_SOURCE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace fencegate::client {

struct LockOptions {
  // Lease time to live; the lock is lost if keep-alive stops for this long.
  // Default: 10 s.
  absl::Duration ttl = absl::Seconds(10);
  // How long Acquire() waits for the lock. Zero: try once.
  // Default: 30 s.
  absl::Duration wait = absl::Seconds(30);
  // Free-form name of the holder, for logs and for the owner check.
  // Default: empty (the implementation picks "<host>:<pid>").
  std::string owner;
};

// Thread safety: token() and name() are immutable; lost() may be called
// from any thread; Release() once, from the owning thread.
class HeldLock {
 public:
  HeldLock() = default;
  HeldLock(const HeldLock&) = delete;
  HeldLock& operator=(const HeldLock&) = delete;
  // Releases the lock if still held (errors ignored), stops keep-alive.
  virtual ~HeldLock() = default;

  // The lock's name, which is also the fencing domain.
  virtual const std::string& name() const = 0;
  // The fencing token: strictly greater than every earlier holder's.
  virtual uint64_t token() const = 0;
  // True once keep-alive failed or the lease ended.
  virtual bool lost() const = 0;
  // Gives the lock up, only if this holder still owns it (compare-and-
  // delete). FAILED_PRECONDITION if it was lost meanwhile; UNAVAILABLE if
  // the source cannot be reached.
  virtual absl::Status Release() = 0;
};

// Thread safety: safe for concurrent use.
class TokenSource {
 public:
  TokenSource() = default;
  TokenSource(const TokenSource&) = delete;
  TokenSource& operator=(const TokenSource&) = delete;
  virtual ~TokenSource() = default;

  // Acquires `name`. DEADLINE_EXCEEDED if it stays held by someone else for
  // options.wait (zero wait: at once); INVALID_ARGUMENT for a bad name or
  // ttl; UNAVAILABLE if the source cannot be reached. `on_lost` may be
  // empty; it runs on the lock's background thread and must not call
  // Release() or destroy the lock (signal another thread instead).
  virtual absl::StatusOr<std::unique_ptr<HeldLock>> Acquire(
      const std::string& name, const LockOptions& options,
      std::function<void()> on_lost) = 0;
};

}  // namespace fencegate::client

#endif  // CLIENT_TOKEN_SOURCE_H_
