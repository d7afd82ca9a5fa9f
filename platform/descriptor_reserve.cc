// Copyright fencegate authors.

#include "platform/descriptor_reserve.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "platform/accept_hook.h"

namespace fencegate::platform {
namespace {

int OpenSpare() { return ::open("/dev/null", O_RDONLY | O_CLOEXEC); }

}  // namespace

DescriptorReserve::~DescriptorReserve() {
  if (spare_ >= 0) ::close(spare_);
}

absl::Status DescriptorReserve::Fill() {
  if (spare_ < 0) spare_ = OpenSpare();
  if (spare_ < 0) {
    return absl::InternalError(
        absl::StrCat("cannot open /dev/null for a spare descriptor: ",
                     std::strerror(errno)));
  }
  return absl::OkStatus();
}

bool DescriptorReserve::TakeOneOff(int listen_fd) {
  if (spare_ < 0) spare_ = OpenSpare();
  if (spare_ < 0) return false;
  ::close(spare_);
  const int taken = RealAccept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  if (taken >= 0) ::close(taken);
  spare_ = OpenSpare();
  return taken >= 0;
}

}  // namespace fencegate::platform
