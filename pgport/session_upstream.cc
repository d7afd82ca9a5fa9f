// Copyright fencegate authors.
//
// A running session's traffic with its server: what goes upstream, the
// flow control that keeps a client that does not read from making the
// session hold more, the server's replies passed back (the pinned
// settings checked on the way), the fence learnt from the database, and
// the session's end (the connection reset and pooled, or closed).

#include <chrono>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "fencegate/common/stale_token.h"
#include "observability/log.h"
#include "pgport/client_session.h"
#include "pgwire/backend.h"
#include "postgres/session_reset.h"
#include "postgres/session_sql.h"
#include "postgres/sqlstates.h"

namespace fencegate::pgport {

void ClientSession::Forward(Expected expected) {
  absl::StrAppend(&upstream_out_, current_);
  queue_.Push(std::move(expected), &client_out_);
}

void ClientSession::Send(const pgwire::FrontendMessage& message,
                         Expected expected) {
  upstream_out_.append(pgwire::Encode(message));
  queue_.Push(std::move(expected), &client_out_);
}

asio::awaitable<bool> ClientSession::WaitForRoom() {
  while (!closed_ &&
         (client_out_.size() + writing_bytes_ > kMaxPendingClientBytes ||
          queue_.size() > kMaxOwed)) {
    // The replies that make room come only for what the server was sent.
    if (!co_await FlushUpstream()) co_return false;
    boost::system::error_code ec;
    room_.expires_at(asio::steady_timer::time_point::max());
    co_await room_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  co_return !closed_;
}

bool ClientSession::ReservePending() {
  MemoryBudget* budget = port_.context.memory;
  const size_t pending = client_out_.size() + writing_bytes_;
  if (budget == nullptr || pending <= FrameReader::kUnreservedBytes ||
      pending <= pending_reserved_) {
    return true;
  }
  // The smaller reservation goes back before the larger one is taken.
  pending_reservation_ = MemoryBudget::Reservation();
  pending_reserved_ = 0;
  absl::StatusOr<MemoryBudget::Reservation> reserved = budget->Reserve(pending);
  if (!reserved.ok()) return false;
  pending_reservation_ = *std::move(reserved);
  pending_reserved_ = pending;
  return true;
}

asio::awaitable<bool> ClientSession::FlushUpstream() {
  if (upstream_out_.empty() || upstream_ == nullptr) co_return true;
  std::string out;
  out.swap(upstream_out_);
  if (!(co_await WriteAll(upstream_->socket(), out)).ok()) {
    co_await Fatal(postgres::kConnectionFailureSqlState,
                   "the route's server closed the session's connection");
    co_return false;
  }
  co_return true;
}

void ClientSession::EndUpstream() {
  ending_ = true;
  if (!tracker_.idle() || skipping_) {
    // The server rolls back the transaction when the connection closes. A
    // statement it still runs is cancelled first: a backend notices a
    // closed connection only when it next reads or writes.
    if (!queue_.empty()) Cancel();
    Close();
    return;
  }
  // The reply loop gives the connection back once this is answered.
  Send(pgwire::Query{"DISCARD ALL"}, OwnOwed(Awaited::kQuery));
  Send(pgwire::Query{postgres::ReseedSql()}, OwnOwed(Awaited::kQuery));
}

asio::awaitable<void> ClientSession::ReplyLoop() {
  Upstream* upstream = upstream_.get();
  for (;;) {
    absl::StatusOr<pgwire::Frame> frame =
        co_await upstream->reader().Next(upstream->socket());
    if (!frame.ok()) {
      if (upstream->reader().out_of_memory()) {
        co_await Fatal(postgres::kOutOfMemorySqlState,
                       frame.status().message());
      } else if (!closed_ && !ending_) {
        co_await Fatal(postgres::kConnectionFailureSqlState,
                       absl::StrCat("the route's server closed the session's "
                                    "connection: ",
                                    frame.status().message()));
      }
      Close();
      co_return;
    }
    // Progress, for the watchdog: a reply, not a notice, a parameter report
    // or a notification, which a statement can send for as long as it runs.
    if (frame->type != 'N' && frame->type != 'S' && frame->type != 'A') {
      last_server_message_ = std::chrono::steady_clock::now();
      statement_cancelled_ = false;
    }
    for (;;) {
      if (frame->type == 'S' && upstream->NoteParameter(*frame)) {
        if (absl::Status s = CheckPinnedSettings(*upstream); !s.ok()) {
          // A function the parser could not see into changed how the
          // server reads text: what the client sends next would be read
          // one way here and another there.
          Log(LogSeverity::kWarning,
              absl::StrCat("pg port: session ", process_id_,
                           " closed: ", s.message()));
          co_await Fatal(postgres::kFeatureNotSupportedSqlState, s.message());
          co_return;
        }
      }
      ReplyOutcome outcome;
      if (absl::Status s = queue_.OnReply(*frame, &outcome); !s.ok()) {
        Log(LogSeverity::kError,
            absl::StrCat("pg port: session ", process_id_, ": ", s.message()));
        co_await Fatal(postgres::kProtocolViolationSqlState, s.message());
        co_return;
      }
      if (outcome.own_error) reset_failed_ = ending_;
      if (outcome.settled.has_value()) tracker_.Settle(*outcome.settled);
      client_out_.append(outcome.to_client);
      if (ending_ && queue_.empty()) {
        if (!reset_failed_ && !closed_) {
          (read_role_ ? route_->read_pool : route_->pool)
              ->Give(std::move(upstream_));
        }
        closed_ = true;
        port_.sessions.erase(process_id_);
        co_return;
      }
      absl::StatusOr<std::optional<pgwire::Frame>> next =
          upstream->reader().Buffered();
      if (!next.ok()) {
        co_await Fatal(postgres::kProtocolViolationSqlState,
                       next.status().message());
        co_return;
      }
      if (!next->has_value()) break;
      frame = **next;
    }
    room_.cancel();  // replies came: the server owes fewer
    MaybeGiveUp();   // the server may be between two transactions now
    if (!ReservePending()) {
      const std::string message = absl::StrCat(
          "out of memory: the client has ", client_out_.size() + writing_bytes_,
          " bytes of replies yet to read, more than the gateway's memory "
          "budget has room for");
      client_out_.clear();  // dropped: the session ends with the error
      co_await Fatal(postgres::kOutOfMemorySqlState, message);
      co_return;
    }
    co_await ToClient({});
    // A client that reads slower than its server answers (a large SELECT
    // or COPY TO) holds the server back, not the port's memory.
    while (client_out_.size() > kMaxPendingClientBytes && writing_client_ &&
           !closed_) {
      boost::system::error_code ec;
      client_drained_.expires_at(asio::steady_timer::time_point::max());
      co_await client_drained_.async_wait(
          asio::redirect_error(asio::use_awaitable, ec));
    }
  }
}

void ClientSession::LearnFromDatabase() {
  Log(LogSeverity::kInfo,
      absl::StrCat("pg port: the database of route \"", route_->spec.name,
                   "\" refused token ", token_, " for domain \"",
                   absl::CHexEscape(domain_),
                   "\" as stale; reading its fence"));
  // In the domain's turn, off the port's thread, and holding no turn
  // runner while it waits for the turn.
  port_.context.fencer->LearnFromStorage(
      domain_, [domain = domain_](absl::Status s) {
        if (!s.ok()) {
          Log(LogSeverity::kWarning,
              absl::StrCat("pg port: could not learn the fence of domain \"",
                           absl::CHexEscape(domain), "\": ", s.message()));
        }
      });
}

absl::Status CheckPinnedSettings(const Upstream& upstream) {
  for (const char* name : {"client_encoding", "standard_conforming_strings"}) {
    auto it = upstream.parameters().find(name);
    if (it != upstream.parameters().end() &&
        !postgres::KeepsPin(name, it->second)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the server session's ", name, " became \"",
          absl::CHexEscape(it->second), "\"; ", postgres::PinnedReason(name),
          ", so the session is closed"));
    }
  }
  return absl::OkStatus();
}

std::string StaleDetail(const absl::Status& status) {
  std::optional<StaleTokenInfo> stale = GetStaleToken(status);
  return stale.has_value() ? absl::StrCat(stale->highest_token) : std::string();
}

}  // namespace fencegate::pgport
