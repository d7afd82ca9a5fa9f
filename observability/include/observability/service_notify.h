// Copyright fencegate authors.
//
// ServiceNotify: tells a service manager (systemd, Type=notify) what the
// gateway's process is doing, through the notification socket named by
// $NOTIFY_SOCKET (sd_notify(3)). Without $NOTIFY_SOCKET every call does
// nothing, so the gateway run by hand or by a test behaves as before.
//
// The gateway calls Ready() once it serves -- its port bound, its fences
// loaded and recovered from its routes' storage, its watchers started and
// its routes checked -- so that systemd starts units ordered after it, and
// `systemctl start` returns, only then (docs/operations.md, "As a systemd
// service").

#ifndef OBSERVABILITY_SERVICE_NOTIFY_H_
#define OBSERVABILITY_SERVICE_NOTIFY_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace fencegate {

// Thread safety: each call is one datagram; safe from any thread. None
// blocks: the socket is a local datagram socket, and a manager that stopped
// reading makes the send fail, not wait.
class ServiceNotify {
 public:
  // READY=1 and a STATUS= line saying what the gateway serves.
  static absl::Status Ready(absl::string_view status);
  // RELOADING=1 before a reload (SIGHUP), READY=1 after it.
  static absl::Status Reloading();
  // STOPPING=1 once shutdown starts (SIGTERM), with a STATUS= line.
  static absl::Status Stopping(absl::string_view status);

  // Whether a service manager asked for notifications ($NOTIFY_SOCKET).
  static bool Wanted();

 private:
  // Sends `state` (newline-separated assignments); OK if not Wanted().
  static absl::Status Send(const std::string& state);
};

}  // namespace fencegate

#endif  // OBSERVABILITY_SERVICE_NOTIFY_H_
