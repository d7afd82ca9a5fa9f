// Copyright fencegate authors.
//
// DescriptorReserve: one file descriptor kept open (on /dev/null) so that a
// process out of descriptors can still take a waiting connection off a
// listening socket, to close it. A workaround that goes with the accept4
// interposition (accept_hook.h): a listener whose queue cannot be drained
// stays readable, and gRPC 1.51's would spin on it or, failing with EMFILE,
// stop listening.
//
// Thread safety: none; the caller serializes (ConnectionLimit's registry
// lock).

#ifndef PLATFORM_DESCRIPTOR_RESERVE_H_
#define PLATFORM_DESCRIPTOR_RESERVE_H_

#include "absl/status/status.h"

namespace fencegate::platform {

class DescriptorReserve {
 public:
  DescriptorReserve() = default;
  DescriptorReserve(const DescriptorReserve&) = delete;
  DescriptorReserve& operator=(const DescriptorReserve&) = delete;
  ~DescriptorReserve();

  // Opens the reserve if it is not open. INTERNAL naming the error if it
  // cannot be opened.
  absl::Status Fill();

  // Frees the reserve, takes one waiting connection off `listen_fd` with
  // the descriptor that frees, closes it, and fills the reserve again.
  // True if a connection was taken.
  bool TakeOneOff(int listen_fd);

 private:
  int spare_ = -1;
};

}  // namespace fencegate::platform

#endif  // PLATFORM_DESCRIPTOR_RESERVE_H_
