// Copyright fencegate authors.
//
// "host:port" addresses, read one way wherever the gateway, its tools or
// the client library take one (listen addresses, the PostgreSQL port's,
// the metrics endpoint, Redis endpoints, gRPC peers): split at the last
// ':', so that an IPv6 host is written in brackets ("[::1]:5432"), the
// port a decimal number of 0..65535.
//
// Thread safety: pure functions.

#ifndef FENCEGATE_COMMON_HOST_PORT_H_
#define FENCEGATE_COMMON_HOST_PORT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fencegate {

struct HostPort {
  std::string host;  // Without an IPv6 address's brackets; may be empty.
  int port = 0;
};

struct HostPortRules {
  // A host must be written ("example.org:80", not ":80").
  bool need_host = false;
  // Port 0 (the system picks one: a listen address) is accepted.
  bool allow_port_zero = true;
};

// `address` split into its host and port. INVALID_ARGUMENT
// `<what> "<address>" is not host:port` if it has no ':', its port is not
// a number of 0..65535 (1..65535 without allow_port_zero), or it has no
// host when `rules` need one.
absl::StatusOr<HostPort> ParseHostPort(absl::string_view address,
                                       absl::string_view what,
                                       HostPortRules rules = {});

// The host of `address` as written before its last ':' (brackets kept), for
// messages; the whole of `address` if it has no ':'.
absl::string_view HostOf(absl::string_view address);

}  // namespace fencegate

#endif  // FENCEGATE_COMMON_HOST_PORT_H_
