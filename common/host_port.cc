// Copyright fencegate authors.

#include "fencegate/common/host_port.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace fencegate {

absl::StatusOr<HostPort> ParseHostPort(absl::string_view address,
                                       absl::string_view what,
                                       HostPortRules rules) {
  const auto refused = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " \"", address, "\" is not host:port"));
  };
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return refused();
  const absl::string_view port_text = address.substr(colon + 1);
  int port = 0;
  if (port_text.empty() || port_text.size() > 5 ||
      !std::all_of(port_text.begin(), port_text.end(), absl::ascii_isdigit) ||
      !absl::SimpleAtoi(port_text, &port) || port > 65535 ||
      (port == 0 && !rules.allow_port_zero)) {
    return refused();
  }
  absl::string_view host = address.substr(0, colon);
  if (absl::ConsumePrefix(&host, "[") && !absl::ConsumeSuffix(&host, "]")) {
    return refused();
  }
  // An IPv6 address without its brackets would have split at its own ':'.
  if (host.find_first_of("[]") != absl::string_view::npos ||
      (host.find(':') != absl::string_view::npos &&
       address.substr(0, 1) != "[")) {
    return refused();
  }
  if (rules.need_host && host.empty()) return refused();
  return HostPort{std::string(host), port};
}

absl::string_view HostOf(absl::string_view address) {
  return address.substr(0, address.rfind(':'));
}

}  // namespace fencegate
