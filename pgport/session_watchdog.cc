// Copyright fencegate authors.
//
// A running session's watchdog: the bounds that hold whatever the session
// set -- a transaction left idle past the port's limit, a statement that
// runs past the route's statement_timeout_ms and a second, and a server
// that does not answer the cancel.

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "observability/log.h"
#include "pgport/client_session.h"
#include "postgres/sqlstates.h"

namespace fencegate::pgport {

asio::awaitable<void> ClientSession::Watchdog() {
  using std::chrono::milliseconds;
  const milliseconds idle_limit =
      absl::ToChronoMilliseconds(port_.options.idle_transaction_timeout);
  // The gRPC route's limit on a Write's run: the route's statement_timeout
  // and a second of grace, enforced by a cancel whatever the session set.
  const int64_t statement_ms = route_->spec.options.statement_timeout_ms;
  const milliseconds statement_limit =
      statement_ms > 0 ? milliseconds(statement_ms + 1000) : milliseconds(0);
  milliseconds tick(1000);
  for (milliseconds limit : {idle_limit, statement_limit}) {
    if (limit > milliseconds(0)) tick = std::min(tick, limit / 4);
  }
  tick = std::max(tick, milliseconds(10));
  asio::steady_timer timer(client_.get_executor());
  std::chrono::steady_clock::time_point cancelled_at;
  while (!closed_) {
    timer.expires_after(tick);
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    // A session whose client has ended is watched until its server has
    // answered everything (then the reply loop pools the connection).
    if (closed_ || (ending_ && queue_.empty())) co_return;
    const auto now = std::chrono::steady_clock::now();
    if (statement_limit > milliseconds(0) && !queue_.empty() &&
        statement_cancelled_ && now - cancelled_at >= milliseconds(1000)) {
      // The server did not answer the cancel within a second: it may be
      // blocked writing to a client that does not read (a backend takes a
      // cancel only between writes), or the client has gone. The session
      // ends; the backend, its connection closed, rolls back and ends.
      Log(LogSeverity::kWarning,
          absl::StrCat("pg port: session ", process_id_,
                       ": the server did not stop a cancelled statement "
                       "within a second; closing the session"));
      Close();
      co_return;
    }
    if (statement_limit > milliseconds(0) && !queue_.empty() &&
        !statement_cancelled_ &&
        now - std::max(last_client_message_, last_server_message_) >=
            statement_limit) {
      // Neither the client nor the server has said anything for longer than
      // a statement may run: the server's statement_timeout was lifted (SET,
      // a DO block), or the client reads too slowly.
      Log(LogSeverity::kWarning,
          absl::StrCat("pg port: session ", process_id_,
                       ": a statement ran longer than route \"",
                       route_->spec.name, "\"'s statement_timeout_ms (",
                       statement_ms, ") and a second; cancelling it"));
      statement_cancelled_ = true;
      cancelled_at = now;
      Cancel();
    }
    if (ending_) continue;
    if (idle_limit > milliseconds(0) && !tracker_.idle() && queue_.empty() &&
        now - last_client_message_ >= idle_limit) {
      Log(LogSeverity::kWarning,
          absl::StrCat(
              "pg port: session ", process_id_,
              " ended: idle in a transaction for longer than ",
              absl::FormatDuration(port_.options.idle_transaction_timeout)));
      co_await Fatal(postgres::kIdleInTransactionSqlState,
                     absl::StrCat("terminating the session: idle in a "
                                  "transaction for longer than the gateway's "
                                  "idle_transaction_timeout (",
                                  absl::FormatDuration(
                                      port_.options.idle_transaction_timeout),
                                  ")"));
      co_return;
    }
  }
}

}  // namespace fencegate::pgport
