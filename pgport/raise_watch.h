// Copyright fencegate authors.
//
// RaiseWatch: one route's look-out for raises that wait for this gateway's
// held fences (postgres/fence_hold.h). While any session of the route holds
// a domain, it asks the route's server every kPoll, on a connection of its
// own, which of those domains a raise waits for
// (<schema>.raises_waiting()), and tells each session that holds one
// (ClientSession::OnRaiseWaiting), which gives the domain up as soon as it
// is between two transactions. A raise from anywhere -- this gateway, another
// one, a direct writer's fence() -- is seen the same way, as a lock wait in
// the server; none has to announce itself. If the server cannot be asked
// (the watch's connection fails), the raise still ends the holders'
// backends after its bound.
//
// Thread safety: the port's I/O thread only.

#ifndef PGPORT_RAISE_WATCH_H_
#define PGPORT_RAISE_WATCH_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "pgport/asio.h"
#include "pgport/port_state.h"

namespace fencegate::pgport {

class RaiseWatch {
 public:
  static constexpr std::chrono::milliseconds kPoll{100};

  // Watches `route` of `port` until the port stops.
  static asio::awaitable<void> Run(PortState& port, PortRoute& route);
};

}  // namespace fencegate::pgport

#endif  // PGPORT_RAISE_WATCH_H_
