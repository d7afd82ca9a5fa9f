// Copyright fencegate authors.

#include "observability/service_notify.h"

#include <systemd/sd-daemon.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace fencegate {
namespace {

// STATUS= is one line: a newline in it would start another assignment.
std::string OneLine(absl::string_view text) {
  std::string line(text);
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return line;
}

}  // namespace

bool ServiceNotify::Wanted() {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  return socket != nullptr && *socket != '\0';
}

absl::Status ServiceNotify::Send(const std::string& state) {
  if (!Wanted()) return absl::OkStatus();
  // 0: keep $NOTIFY_SOCKET, for the later notifications.
  const int sent = sd_notify(0, state.c_str());
  if (sent > 0) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat("notifying the service manager ($NOTIFY_SOCKET) failed: ",
                   sent < 0 ? std::strerror(-sent) : "no socket"));
}

absl::Status ServiceNotify::Ready(absl::string_view status) {
  return Send(absl::StrCat("READY=1\nSTATUS=", OneLine(status)));
}

absl::Status ServiceNotify::Reloading() { return Send("RELOADING=1"); }

absl::Status ServiceNotify::Stopping(absl::string_view status) {
  return Send(absl::StrCat("STOPPING=1\nSTATUS=", OneLine(status)));
}

}  // namespace fencegate
