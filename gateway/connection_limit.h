// Copyright fencegate authors.
//
// ConnectionLimit: caps the client connections the gateway's gRPC server
// holds open on its TCP port, and keeps its listener alive when the process
// runs out of file descriptors.
//
// gRPC 1.51 accepts connections itself and has no setting for how many it
// keeps (grpc.max_allowed_incoming_connections came in a later release).
// Worse, when accept4 fails for want of descriptors (EMFILE, ENFILE) its
// listener logs "Failed accept4" and never listens again. So the gateway
// steps in where gRPC's listener takes a connection: this library defines
// accept4(2), exported from the executable (the link adds
// --export-dynamic-symbol=accept4), so that the dynamic linker binds gRPC's
// call to it rather than to the C library's. It calls the C library's
// accept4, then, for a socket listening on a port with a limit installed:
//   - a connection accepted while `max` are open is closed at once, before
//     gRPC sees it, and the next one in the kernel's queue is taken instead
//     (so an edge-triggered listener is never left with one waiting);
//   - out of descriptors, it frees a spare descriptor kept for the purpose,
//     takes the waiting connection with it and closes it, and returns
//     EAGAIN, never EMFILE, so that gRPC's listener carries on.
// Either way the client sees its connection closed (gRPC: UNAVAILABLE).
// Sockets listening on other ports, or not on TCP, pass through untouched.
//
// Open connections are counted from Install() on. Closes are noticed when
// the limit is reached, by one fstat(2) per tracked socket (a closed
// descriptor, or one reused for another file, no longer counts), at most
// once per `recount_every`: a flood of connections at the limit costs a
// recount per interval, not per connection, and a connection closed just
// now may still be counted until the next recount. Below the limit an
// accept costs a getsockname(2), an fstat(2) and a lock more.
//
// Thread safety: thread safe; accept4 runs on any thread.

#ifndef GATEWAY_CONNECTION_LIMIT_H_
#define GATEWAY_CONNECTION_LIMIT_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "metrics/metrics_context.h"
#include "prometheus/counter.h"

namespace fencegate {

class ConnectionLimit {
 public:
  // Caps the connections accepted on TCP port `port` (1-65535, any local
  // address) at `max` (at least 1) until the returned object is destroyed.
  // FAILED_PRECONDITION if this executable does not export accept4, so
  // that gRPC's calls would bypass it; ALREADY_EXISTS if the port already
  // has a limit (which stays); INVALID_ARGUMENT for a bad port or max;
  // INTERNAL if the spare descriptor cannot be opened. With `metrics`
  // enabled, exports fencegate_connections_refused_total{reason="limit"
  // or "descriptors"} and fencegate_connections_open.
  static absl::StatusOr<std::unique_ptr<ConnectionLimit>> Install(
      int port, uint32_t max, const MetricsContext& metrics,
      absl::Duration recount_every = absl::Milliseconds(100));

  ConnectionLimit(const ConnectionLimit&) = delete;
  ConnectionLimit& operator=(const ConnectionLimit&) = delete;
  ~ConnectionLimit();  // Uninstalls: the port's accepts pass through again.

  // Connections open now (closes are looked for first).
  size_t Open() ABSL_LOCKS_EXCLUDED(mu_);
  // Connections closed at accept: because `max` were open, and because the
  // process was out of file descriptors.
  uint64_t refused() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t refused_for_descriptors() const ABSL_LOCKS_EXCLUDED(mu_);

  // For accept4 only. Admit: `fd` was just accepted on this limit's port;
  // true if it may be kept (it is counted), false if the caller must close
  // it. RefusedForDescriptors: the caller closed one connection for want
  // of descriptors.
  bool Admit(int fd) ABSL_LOCKS_EXCLUDED(mu_);
  void RefusedForDescriptors() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  ConnectionLimit(int port, uint32_t max, const MetricsContext& metrics,
                  absl::Duration recount_every);
  // Forgets the descriptors that are closed or reused for another file.
  void Prune() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The warning to log now for a refusal (empty: one was logged lately).
  std::string Report(absl::string_view why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int port_;
  const uint32_t max_;
  const absl::Duration recount_every_;
  // Null: metrics off.
  prometheus::Counter* refused_counter_ = nullptr;
  prometheus::Counter* refused_descriptors_counter_ = nullptr;
  std::shared_ptr<void> open_gauge_;
  mutable absl::Mutex mu_;
  // Descriptor -> inode of the socket accepted on it.
  absl::flat_hash_map<int, ino_t> open_ ABSL_GUARDED_BY(mu_);
  absl::Time last_recount_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  uint64_t refused_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t refused_descriptors_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t unreported_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_report_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace fencegate

#endif  // GATEWAY_CONNECTION_LIMIT_H_
