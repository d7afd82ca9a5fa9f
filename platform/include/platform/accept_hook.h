// Copyright fencegate authors.
//
// The accept4(2) interposition: a workaround for gRPC 1.51, retired by a
// gRPC whose listener keeps listening after accept4 fails with EMFILE or
// ENFILE and that caps its own connections (grpc.max_allowed_incoming_
// connections, in gRPC releases after Debian 12's 1.51).
//
// gRPC 1.51 accepts connections itself and offers no hook on them; when
// accept4 fails for want of descriptors its listener logs "Failed accept4"
// and never listens again. This library defines accept4, which the
// executable exports (link with --export-dynamic-symbol=accept4: the
// fencegate_platform target adds it), so that the dynamic linker binds
// gRPC's call here rather than to the C library's. It calls the C library's
// accept4 and asks the process's AcceptHook, if one is set:
//   - keep(listen_fd, fd): false closes the accepted connection before its
//     caller sees it and takes the next one in the kernel's queue (so an
//     edge-triggered listener is never left with one waiting);
//   - on EMFILE or ENFILE, shed_for_descriptors(listen_fd): kOne means the hook
//   took and
//     closed one waiting connection (the next may find a descriptor free),
//     kNone that it could not, and the call returns EAGAIN, never EMFILE, so
//     that gRPC's listener carries on; kNotMine passes the error through.
// Without a hook every call passes straight to the C library.
//
// Thread safety: accept4 runs on any thread; SetAcceptHook must not race
// with accepts that could use the hook it replaces.

#ifndef PLATFORM_ACCEPT_HOOK_H_
#define PLATFORM_ACCEPT_HOOK_H_

#include <sys/socket.h>

namespace fencegate::platform {

// Plain functions, not virtual ones: they run when the process may be out
// of descriptors, where UBSan's check of a virtual call (which probes the
// object's memory through a pipe) cannot run and reports the call as
// undefined.
struct AcceptHook {
  enum class ShedResult { kNotMine, kOne, kNone };

  // Whether connection `fd`, just accepted on `listen_fd`, is kept.
  bool (*keep)(int listen_fd, int fd) = nullptr;
  // accept4 on `listen_fd` failed for want of descriptors.
  ShedResult (*shed_for_descriptors)(int listen_fd) = nullptr;
};

// Sets the process's hook (null: none); it must outlive every accept.
void SetAcceptHook(const AcceptHook* hook);

// Whether gRPC's calls reach this library's accept4: the executable
// exports it.
bool AcceptIsInterposed();

// The C library's accept4 (the next definition after this library's).
int RealAccept4(int fd, sockaddr* addr, socklen_t* len, int flags);

}  // namespace fencegate::platform

#endif  // PLATFORM_ACCEPT_HOOK_H_
