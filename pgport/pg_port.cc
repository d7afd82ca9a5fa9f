// Copyright fencegate authors.

#include "pgport/pg_port.h"

#include <openssl/rand.h>

#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "fencegate/common/host_port.h"
#include "fencegate/common/thread_name.h"
#include "observability/log.h"
#include "pgport/asio.h"
#include "pgport/client_session.h"
#include "pgport/port_state.h"
#include "pgport/raise_watch.h"
#include "pgwire/backend.h"
#include "postgres/sqlstates.h"

namespace fencegate {

using pgport::tcp;
using pgport::asio::awaitable;
namespace asio = pgport::asio;

class PgPort::Impl {
 public:
  pgport::PortState state;
  tcp::acceptor acceptor{state.io};
  std::thread thread;
  int port = 0;
  bool shut_down = false;

  awaitable<void> Accept();
  // At the session limit: closes the oldest session not yet signed in, so
  // that connections which never sign in cannot keep every slot taken
  // (as on the gRPC port, unproven connections go first).
  void ShedOldestUnproven();
};

namespace {

int32_t RandomKey() {
  int32_t key = 0;
  RAND_bytes(reinterpret_cast<unsigned char*>(&key), sizeof(key));
  return key;
}

// A session past the limit is told so and closed.
awaitable<void> Refuse(tcp::socket socket, uint32_t limit) {
  (void)co_await pgport::WriteAll(
      socket,
      pgwire::EncodeError("FATAL", postgres::kTooManyConnectionsSqlState,
                          absl::StrCat("the gateway's PostgreSQL port "
                                       "serves at most ",
                                       limit, " sessions at once")));
  boost::system::error_code ec;
  socket.close(ec);
}

// Holds the session for as long as it runs.
awaitable<void> RunSession(std::shared_ptr<pgport::ClientSession> session) {
  co_await session->Run();
}

}  // namespace

void PgPort::Impl::ShedOldestUnproven() {
  std::shared_ptr<pgport::ClientSession> oldest;
  int32_t oldest_id = 0;
  for (const auto& [id, weak] : state.sessions) {
    std::shared_ptr<pgport::ClientSession> session = weak.lock();
    if (session == nullptr || session->signed_in()) continue;
    // Process ids grow with each connection: the lowest is the oldest.
    if (oldest == nullptr || id < oldest_id) {
      oldest = std::move(session);
      oldest_id = id;
    }
  }
  if (oldest == nullptr) return;
  Log(LogSeverity::kWarning,
      absl::StrCat("pg port: session ", oldest_id,
                   " closed: not signed in while every one of the port's ",
                   state.options.max_connections,
                   " sessions was taken and another connection came"));
  oldest->Close();
}

awaitable<void> PgPort::Impl::Accept() {
  for (;;) {
    boost::system::error_code ec;
    tcp::socket socket = co_await acceptor.async_accept(
        asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (!acceptor.is_open() || state.stopping) co_return;
      Log(LogSeverity::kWarning,
          absl::StrCat("pg port: accept failed: ", ec.message()));
      // Out of descriptors, say: let sessions end before trying again.
      asio::steady_timer pause(state.io, std::chrono::milliseconds(100));
      co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    socket.set_option(tcp::no_delay(true), ec);
    if (state.sessions.size() >= state.options.max_connections) {
      ShedOldestUnproven();
    }
    if (state.sessions.size() >= state.options.max_connections) {
      asio::co_spawn(state.io,
                     Refuse(std::move(socket), state.options.max_connections),
                     asio::detached);
      continue;
    }
    const int32_t process_id = state.next_process_id++;
    if (state.next_process_id <= 0) state.next_process_id = 1;
    auto session = std::make_shared<pgport::ClientSession>(
        state, std::move(socket), process_id, RandomKey());
    state.sessions[process_id] = session;  // weak: for CancelRequest
    asio::co_spawn(state.io, RunSession(std::move(session)), asio::detached);
  }
}

absl::StatusOr<std::unique_ptr<PgPort>> PgPort::Start(PgPortOptions options,
                                                      PgPortContext context) {
  auto impl = std::make_unique<Impl>();
  for (const PgPortRoute& route : options.routes) {
    absl::StatusOr<pgport::UpstreamTarget> target =
        pgport::UpstreamTargetOf(route.options);
    if (!target.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "route \"", route.name, "\": ", target.status().message()));
    }
    absl::StatusOr<std::optional<pgport::UpstreamTarget>> read =
        pgport::ReadTargetOf(route.options, *target);
    if (!read.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "route \"", route.name, "\": ", read.status().message()));
    }
    const auto idle = static_cast<size_t>(std::max(1, route.options.pool_size));
    pgport::PortRoute& served = impl->state.routes[route.name];
    served.spec = route;
    served.target = *std::move(target);
    served.pool = std::make_unique<pgport::UpstreamPool>(idle);
    served.read_target = *std::move(read);
    if (served.read_target.has_value()) {
      served.read_pool = std::make_unique<pgport::UpstreamPool>(idle);
    }
  }
  const std::string& address = options.listen_address;
  absl::StatusOr<HostPort> parsed = ParseHostPort(address, "pg.listen:");
  if (!parsed.ok()) return parsed.status();
  const std::string& host = parsed->host;
  const int port = parsed->port;
  boost::system::error_code ec;
  tcp::resolver resolver(impl->state.io);
  auto endpoints = resolver.resolve(std::string(host), absl::StrCat(port), ec);
  if (ec || endpoints.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pg.listen: cannot resolve \"", host, "\": ", ec.message()));
  }
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("pg.listen: cannot serve ", address, ": ", ec.message()));
  }
  impl->port = impl->acceptor.local_endpoint().port();
  impl->state.options = std::move(options);
  impl->state.context = std::move(context);
  impl->state.sql = impl->state.context.classifier;
  if (impl->state.sql == nullptr) {
    impl->state.own_sql = std::make_unique<postgres::SqlClassifier>(
        postgres::SqlClassifier::Options{});
    impl->state.sql = impl->state.own_sql.get();
  }
  if (impl->state.options.tls.enabled()) {
    absl::StatusOr<std::unique_ptr<pgport::PortTls>> tls =
        pgport::PortTls::Create(impl->state.options.tls,
                                impl->state.options.require_client_certificate,
                                &impl->state.context.run_blocking);
    if (!tls.ok()) return tls.status();
    impl->state.tls = *std::move(tls);
  }
  asio::co_spawn(impl->state.io, impl->Accept(), asio::detached);
  for (auto& [name, route] : impl->state.routes) {
    asio::co_spawn(impl->state.io, pgport::RaiseWatch::Run(impl->state, route),
                   asio::detached);
  }
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] {
    NameThisThread("fg-pgport");
    raw->state.io.run();
  });
  return std::unique_ptr<PgPort>(new PgPort(std::move(impl)));
}

PgPort::PgPort(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

PgPort::~PgPort() { Shutdown(); }

int PgPort::port() const { return impl_->port; }

void PgPort::Shutdown() {
  if (impl_->shut_down) return;
  impl_->shut_down = true;
  Impl* impl = impl_.get();
  asio::post(impl->state.io, [impl] {
    impl->state.stopping = true;
    boost::system::error_code ec;
    impl->acceptor.close(ec);
    // Close() erases the session from the map: copy it first.
    std::vector<std::shared_ptr<pgport::ClientSession>> open;
    for (const auto& [id, weak] : impl->state.sessions) {
      if (auto session = weak.lock()) open.push_back(std::move(session));
    }
    for (const auto& session : open) session->Close();
    for (auto& [name, route] : impl->state.routes) {
      boost::system::error_code closed;
      if (route.watch != nullptr) route.watch->socket().close(closed);
    }
  });
  impl->thread.join();
}

}  // namespace fencegate
