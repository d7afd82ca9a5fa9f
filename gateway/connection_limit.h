// Copyright fencegate authors.
//
// ConnectionLimit: caps the client connections the gateway's gRPC server
// holds open on its TCP port.
//
// gRPC 1.51 accepts connections itself and has no setting for how many it
// keeps (grpc.max_allowed_incoming_connections came in a later release).
// So the cap is enforced where gRPC's listener takes a connection: this
// library defines accept4(2). The dynamic linker binds gRPC's call to the
// executable's definition before the C library's; it calls the C library's
// accept4 and then asks the limit installed for the listening socket's
// port, if any. A connection accepted while `max` are open is closed at
// once, before gRPC sees it, and the next one in the kernel's queue is
// taken instead (so an edge-triggered listener is never left with a
// connection waiting). Its client sees the connection closed: gRPC reports
// UNAVAILABLE. Sockets listening on other ports, or not on TCP, pass
// through untouched.
//
// Open connections are counted from Install() on. Closes are noticed when
// the limit would refuse: each tracked socket is checked with one fstat(2)
// (a closed descriptor, or one reused for another file, no longer counts),
// so an accept below the limit costs one getsockname(2) more, and one at
// the limit costs a look at every open connection.
//
// Thread safety: thread safe; accept4 runs on any thread.

#ifndef GATEWAY_CONNECTION_LIMIT_H_
#define GATEWAY_CONNECTION_LIMIT_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "metrics/metrics_context.h"
#include "prometheus/counter.h"

namespace fencegate {

class ConnectionLimit {
 public:
  // Caps the connections accepted on TCP port `port` (1-65535, any local
  // address) at `max` (at least 1) until the returned object is destroyed.
  // FAILED_PRECONDITION if accept4 in this process is not this library's
  // (another definition came first), since the cap would not hold;
  // ALREADY_EXISTS if the port already has a limit; INVALID_ARGUMENT for a
  // bad port or max. With `metrics` enabled, exports
  // fencegate_connections_refused_total and fencegate_connections_open.
  static absl::StatusOr<std::unique_ptr<ConnectionLimit>> Install(
      int port, uint32_t max, const MetricsContext& metrics);

  ConnectionLimit(const ConnectionLimit&) = delete;
  ConnectionLimit& operator=(const ConnectionLimit&) = delete;
  ~ConnectionLimit();  // Uninstalls: the port's accepts pass through again.

  // Connections open now (closes are looked for first).
  size_t Open() ABSL_LOCKS_EXCLUDED(mu_);
  // Connections closed at accept because `max` were open.
  uint64_t refused() const ABSL_LOCKS_EXCLUDED(mu_);

  // Called by accept4 with a descriptor just accepted on this limit's port:
  // true if it may be kept (it is counted), false if the caller must close
  // it. Not for other callers.
  bool Admit(int fd) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  ConnectionLimit(int port, uint32_t max, const MetricsContext& metrics);
  // Forgets the descriptors that are closed or reused for another file.
  void Prune() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int port_;
  const uint32_t max_;
  prometheus::Counter* refused_counter_ = nullptr;  // Null: metrics off.
  std::shared_ptr<void> open_gauge_;
  mutable absl::Mutex mu_;
  // Descriptor -> inode of the socket accepted on it.
  absl::flat_hash_map<int, ino_t> open_ ABSL_GUARDED_BY(mu_);
  uint64_t refused_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t refused_unreported_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_report_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace fencegate

#endif  // GATEWAY_CONNECTION_LIMIT_H_
