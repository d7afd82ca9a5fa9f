// Copyright fencegate authors.

#include "platform/accept_hook.h"

#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

extern "C" int accept4(int fd, sockaddr* addr, socklen_t* len, int flags);

namespace fencegate::platform {
namespace {

using Accept4 = int (*)(int, sockaddr*, socklen_t*, int);

std::atomic<const AcceptHook*>& TheHook() {
  static std::atomic<const AcceptHook*> hook{nullptr};
  return hook;
}

}  // namespace

void SetAcceptHook(const AcceptHook* hook) {
  TheHook().store(hook, std::memory_order_release);
}

bool AcceptIsInterposed() {
  return ::dlsym(RTLD_DEFAULT, "accept4") ==
         reinterpret_cast<void*>(&::accept4);
}

int RealAccept4(int fd, sockaddr* addr, socklen_t* len, int flags) {
  static const Accept4 real =
      reinterpret_cast<Accept4>(::dlsym(RTLD_NEXT, "accept4"));
  if (real == nullptr) {
    return static_cast<int>(::syscall(SYS_accept4, fd, addr, len, flags));
  }
  return real(fd, addr, len, flags);
}

}  // namespace fencegate::platform

// gRPC's listener (and every other caller in the process) comes here.
extern "C" int accept4(int fd, sockaddr* addr, socklen_t* len, int flags) {
  using fencegate::platform::AcceptHook;
  const socklen_t len_in = len != nullptr ? *len : 0;
  for (;;) {
    if (len != nullptr) *len = len_in;
    const int accepted = fencegate::platform::RealAccept4(fd, addr, len, flags);
    const AcceptHook* hook =
        fencegate::platform::TheHook().load(std::memory_order_acquire);
    if (hook == nullptr) return accepted;
    if (accepted >= 0) {
      if (hook->keep(fd, accepted)) return accepted;
      // Refused: close it and take the next one, so that a listener woken
      // once for several connections is not left with one waiting.
      ::close(accepted);
      continue;
    }
    const int error = errno;
    if (error != EMFILE && error != ENFILE) return -1;
    switch (hook->shed_for_descriptors(fd)) {
      case AcceptHook::ShedResult::kNotMine:
        errno = error;
        return -1;
      case AcceptHook::ShedResult::kOne:
        continue;  // The next one may find a descriptor free again.
      case AcceptHook::ShedResult::kNone:
        // Nothing left waiting, or no descriptor to take it with: EAGAIN
        // keeps gRPC's listener listening (EMFILE would end it).
        errno = EAGAIN;
        return -1;
    }
  }
}
