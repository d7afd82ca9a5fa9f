// Copyright fencegate authors.

#include "pgport/raise_watch.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "observability/log.h"
#include "pgport/client_session.h"
#include "postgres/fence_hold.h"

namespace fencegate::pgport {

asio::awaitable<void> RaiseWatch::Run(PortState& port, PortRoute& route) {
  asio::steady_timer timer(port.io);
  std::unique_ptr<Upstream> watch;
  bool warned = false;
  while (!port.stopping) {
    timer.expires_after(kPoll);
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (port.stopping) break;
    // The held domains of this route's sessions.
    absl::flat_hash_map<std::string, std::vector<std::weak_ptr<ClientSession>>>
        holders;
    for (const auto& [id, weak] : port.sessions) {
      std::shared_ptr<ClientSession> session = weak.lock();
      if (session == nullptr || session->route() != &route ||
          session->held_domain().empty()) {
        continue;
      }
      holders[session->held_domain()].push_back(weak);
    }
    if (holders.empty()) continue;
    if (watch == nullptr) {
      absl::StatusOr<std::unique_ptr<Upstream>> made =
          co_await Upstream::Connect(route.target,
                                     port.options.max_message_bytes,
                                     port.context.memory);
      if (!made.ok()) {
        if (!warned) {
          Log(LogSeverity::kWarning,
              absl::StrCat("pg port: route \"", route.spec.name,
                           "\": cannot watch for raises (they end this "
                           "gateway's holders after their bound): ",
                           made.status().message()));
          warned = true;
        }
        continue;
      }
      watch = *std::move(made);
      route.watch = watch.get();
      warned = false;
    }
    std::vector<std::string> domains;
    domains.reserve(holders.size());
    for (const auto& [domain, unused] : holders) domains.push_back(domain);
    std::optional<std::string> waiting;
    // Built before the co_await: GCC 12 cannot keep a braced list's array
    // in a coroutine frame.
    std::vector<UpstreamStatement> ask(1);
    ask[0].sql = postgres::RaisesWaitingSql(route.spec.options.fence_schema);
    ask[0].parameters.emplace_back(postgres::TextArrayLiteral(domains));
    absl::Status s = co_await watch->RunExtended(ask, &waiting);
    if (!s.ok()) {
      if (port.stopping) break;  // its connection was closed to stop
      Log(LogSeverity::kWarning,
          absl::StrCat("pg port: route \"", route.spec.name,
                       "\": watching for raises failed: ", s.message()));
      route.watch = nullptr;
      watch.reset();
      continue;
    }
    if (!waiting.has_value()) continue;
    for (absl::string_view position : absl::StrSplit(*waiting, ',')) {
      size_t i = 0;
      if (!absl::SimpleAtoi(position, &i) || i < 1 || i > domains.size()) {
        continue;
      }
      for (const std::weak_ptr<ClientSession>& weak : holders[domains[i - 1]]) {
        if (std::shared_ptr<ClientSession> session = weak.lock()) {
          session->OnRaiseWaiting();
        }
      }
    }
  }
  route.watch = nullptr;
}

}  // namespace fencegate::pgport
