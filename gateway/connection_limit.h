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
// steps in where gRPC's listener takes a connection, through the accept4
// interposition (platform/include/platform/accept_hook.h) and a spare
// descriptor (platform/include/platform/descriptor_reserve.h). For a socket
// listening on a port with a limit installed:
//   - a connection accepted while `max` are open is closed at once, before
//     gRPC sees it, and the next one in the kernel's queue is taken instead
//     (so an edge-triggered listener is never left with one waiting);
//   - out of descriptors, the spare descriptor is freed to take the waiting
//     connection and close it, and gRPC's listener is told EAGAIN, never
//     EMFILE, so that it carries on.
// Either way the client sees its connection closed (gRPC: UNAVAILABLE).
// Sockets listening on other ports, or not on TCP, pass through untouched.
//
// A share for connections that have not proven themselves. A connection is
// unproven from its accept until its first RPC arrives (MarkProven(), from
// ProofOfCallInterceptors, which sees every RPC): until then it is in its
// TLS handshake, or has not sent a call. With an `unproven_share`, when
// `max` are open and a new connection arrives while at least
// `unproven_share` of the open ones are unproven, the oldest unproven one
// is shut down (shutdown(2); gRPC then closes it) to make room for the new
// one, instead of refusing it. So a flood of connections that never finish
// a handshake cannot keep new peers out: a newcomer is let in, and is shed
// only if `unproven_share` newer unproven connections arrive before its
// first RPC; and a connection that has made an RPC is never closed for a
// newcomer. (The socket is checked, by inode, just before it is shut
// down. A socket that some thread of the process opens on the same
// descriptor number in that instant — another client's connection, or a
// storage connection — would be shut down instead; its owner sees the
// connection end and reconnects.)
//
// Open connections are counted from Install() on. Closes are noticed when
// the limit is reached, by one fstat(2) per tracked socket (a closed
// descriptor, or one reused for another file, no longer counts), at most
// once per `recount_every`: a flood of connections at the limit costs a
// recount per interval, not per connection, and a connection closed just
// now may still be counted until the next recount. Below the limit an
// accept costs a getsockname(2), an fstat(2) and a lock more.
//
// Thread safety: thread safe; accept4 and MarkProven run on any thread.

#ifndef GATEWAY_CONNECTION_LIMIT_H_
#define GATEWAY_CONNECTION_LIMIT_H_

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/support/server_interceptor.h"
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
  // `unproven_share` (0: none, connections are never shed) is described
  // above; with metrics also fencegate_connections_shed_total.
  static absl::StatusOr<std::unique_ptr<ConnectionLimit>> Install(
      int port, uint32_t max, const MetricsContext& metrics,
      absl::Duration recount_every = absl::Milliseconds(100),
      uint32_t unproven_share = 0);

  ConnectionLimit(const ConnectionLimit&) = delete;
  ConnectionLimit& operator=(const ConnectionLimit&) = delete;
  ~ConnectionLimit();  // Uninstalls: the port's accepts pass through again.

  // Connections open now (closes are looked for first).
  size_t Open() ABSL_LOCKS_EXCLUDED(mu_);
  // Connections closed at accept: because `max` were open, and because the
  // process was out of file descriptors.
  uint64_t refused() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t refused_for_descriptors() const ABSL_LOCKS_EXCLUDED(mu_);
  // Unproven connections shut down to make room for a newcomer.
  uint64_t shed() const ABSL_LOCKS_EXCLUDED(mu_);

  // An RPC arrived from `peer` (gRPC's form: "ipv4:127.0.0.1:5000",
  // "ipv6:%5B::1%5D:5000", percent escapes decoded; also "ipv6:[::1]:5000"):
  // its connection, if open and unproven, is proven. Cheap when no
  // connection is unproven (HasUnproven, an atomic read).
  void MarkProven(absl::string_view peer) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether some open connection is unproven now. Never blocks.
  bool HasUnproven() const;

  // For accept4 only. Admit: `fd` was just accepted on this limit's port;
  // true if it may be kept (it is counted), false if the caller must close
  // it. RefusedForDescriptors: the caller closed one connection for want
  // of descriptors.
  bool Admit(int fd) ABSL_LOCKS_EXCLUDED(mu_);
  void RefusedForDescriptors() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // An open connection: its socket's inode (to tell it from a later file
  // on the same descriptor), and while unproven its peer and accept order.
  struct Connection {
    ino_t inode = 0;
    bool unproven = false;
    std::string peer;
    uint64_t order = 0;
  };

  ConnectionLimit(int port, uint32_t max, const MetricsContext& metrics,
                  absl::Duration recount_every, uint32_t unproven_share);
  // Forgets the descriptors that are closed or reused for another file.
  void Prune() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops tracking `fd`.
  void Forget(int fd) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops counting `fd`'s connection as unproven.
  void ForgetUnproven(int fd, Connection& connection)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees the slot of the oldest unproven connection: shuts it down if it
  // is still open. False if none is unproven.
  bool ShedOldestUnproven() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The warning to log now for a refusal (empty: one was logged lately).
  std::string Report(absl::string_view why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int port_;
  const uint32_t max_;
  const absl::Duration recount_every_;
  const uint32_t unproven_share_;
  // Null: metrics off.
  prometheus::Counter* refused_counter_ = nullptr;
  prometheus::Counter* refused_descriptors_counter_ = nullptr;
  prometheus::Counter* shed_counter_ = nullptr;
  std::shared_ptr<void> open_gauge_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int, Connection> open_ ABSL_GUARDED_BY(mu_);
  // Unproven connections: by accept order (oldest first), and by peer.
  std::map<uint64_t, int> unproven_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, int> unproven_peers_ ABSL_GUARDED_BY(mu_);
  // unproven_.size(), read without the lock by MarkProven.
  std::atomic<size_t> unproven_count_{0};
  uint64_t next_order_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t shed_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_recount_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  uint64_t refused_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t refused_descriptors_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t unreported_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_report_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

// A gRPC server interceptor factory that hands the peer of every RPC to
// the attached ConnectionLimit's MarkProven. While every connection is
// proven it adds no interceptor to the call; otherwise it marks the peer at
// once if the call is bound to its connection (callback and synchronous
// calls), else (calls on a completion queue, which gRPC binds after it
// creates the interceptors) adds one that marks it at the call's first
// hook, when its initial metadata has arrived. Register it with the
// ServerBuilder; attach the limit once it is installed (it may be after
// the server starts, for port 0); RPCs before that prove nothing.
class ProofOfCallInterceptors final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  // `limit` must outlive the server this factory is registered with.
  void Attach(ConnectionLimit* limit) {
    limit_.store(limit, std::memory_order_release);
  }
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

 private:
  std::atomic<ConnectionLimit*> limit_{nullptr};
};

}  // namespace fencegate

#endif  // GATEWAY_CONNECTION_LIMIT_H_
