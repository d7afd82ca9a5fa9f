// Copyright fencegate authors.
//
// The fence a session's server connection holds (postgres/fence_hold.h):
// armed and held before the client's first message (hold() raising the
// database's fence if it is lower), and given up -- which ends the session --
// once a raise waits for it and the session is between two transactions.

#include <openssl/rand.h>

#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "fencegate/common/stale_token.h"
#include "observability/log.h"
#include "pgport/client_session.h"
#include "pgwire/frontend.h"
#include "postgres/fence_hold.h"
#include "postgres/fence_schema.h"

namespace fencegate::pgport {
namespace {

// The prepared statement of the port's own statements in a running session.
constexpr char kOwnStatement[] = "fencegate_own";

}  // namespace

const std::string& ClientSession::held_domain() const {
  static const std::string* const kNone = new std::string();
  return holding_ ? domain_ : *kNone;
}

asio::awaitable<absl::Status> ClientSession::Hold(const OwnRunner& run) {
  if (secret_.empty()) {
    // A secret of this session's: the connection is armed with it (DISCARD
    // ALL, the reset before the pool, disarms it).
    std::string raw(24, '\0');
    if (RAND_bytes(reinterpret_cast<unsigned char*>(raw.data()),
                   static_cast<int>(raw.size())) != 1) {
      co_return absl::InternalError("no random bytes for the session's secret");
    }
    secret_ = absl::Base64Escape(raw);
  }
  // Refused here first, so that a refusal moves nothing anywhere.
  if (token_ != 0) {
    if (absl::Status s = co_await CheckLocally(); !s.ok()) co_return s;
  }
  const std::string& schema = route_->spec.options.fence_schema;
  const std::string token = absl::StrCat(token_);
  std::optional<std::string> domain_parameter;
  std::optional<std::string> token_parameter;
  if (token_ != 0) {
    domain_parameter = domain_;
    token_parameter = token;
  }
  // Its own READ COMMITTED transaction, whatever the session's defaults:
  // hold() reads the fence row after its lock is given; READ WRITE, since
  // it raises a lower row (in a session without a token until now, whose
  // default is read-only). (The list is built before any co_await: GCC 12
  // cannot keep a braced list's array in a coroutine frame.)
  std::vector<UpstreamStatement> hold(3);
  hold[0].sql = "BEGIN ISOLATION LEVEL READ COMMITTED, READ WRITE";
  hold[1].sql = postgres::HoldSql(schema);
  hold[1].parameters = {domain_parameter, token_parameter, secret_};
  hold[2].sql = "COMMIT";
  std::optional<std::string> value;
  if (absl::Status s = co_await run(hold, &value); !s.ok()) co_return s;
  if (token_ == 0) co_return absl::OkStatus();  // armed only
  co_return Held(value);
}

absl::Status ClientSession::Held(const std::optional<std::string>& value) {
  uint64_t held = 0;
  if (!value.has_value() || !absl::SimpleAtoi(*value, &held)) {
    return absl::FailedPreconditionError(
        "the route's server answered hold() with no token");
  }
  if (held > token_) {
    LearnFromDatabase();
    return StaleTokenError(domain_, token_, held);
  }
  if (held < token_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the database's fence of domain \"", absl::CHexEscape(domain_),
        "\" is ", held, " after hold() raised it to ", token_));
  }
  holding_ = true;
  return absl::OkStatus();
}

asio::awaitable<absl::Status> ClientSession::RunOwn(
    const std::vector<UpstreamStatement>& statements,
    std::optional<std::string>* value) {
  if (!co_await Drain()) {
    co_return absl::UnavailableError("the session ended");
  }
  auto result = std::make_shared<OwnResult>();
  for (const UpstreamStatement& statement : statements) {
    // A statement of the port's own name (clients may not use the prefix),
    // so that the client's unnamed statement, which outlives a Sync, stays
    // as it was; closing one that does not exist is no error.
    Send(pgwire::Close{pgwire::Target::kStatement, kOwnStatement},
         OwnOwed(Awaited::kClose, result));
    Send(pgwire::Parse{kOwnStatement, statement.sql, {}},
         OwnOwed(Awaited::kParse, result));
    pgwire::Bind bind;
    bind.statement = kOwnStatement;
    for (const std::optional<std::string>& p : statement.parameters) {
      bind.parameters.push_back(
          p.has_value() ? std::optional<absl::string_view>(*p) : std::nullopt);
    }
    Send(bind, OwnOwed(Awaited::kBind, result));
    Send(pgwire::Execute{"", 0}, OwnOwed(Awaited::kExecute, result));
  }
  Send(pgwire::Sync{}, OwnOwed(Awaited::kSync, result));
  if (!co_await Drain()) {
    co_return absl::UnavailableError("the session ended");
  }
  if (!result->error_code.empty()) {
    absl::Status error = absl::FailedPreconditionError(absl::StrCat(
        "the route's server refused the gateway's statements: ",
        result->error_message, " (SQLSTATE ", result->error_code, ")"));
    error.SetPayload(kSqlStatePayload, absl::Cord(result->error_code));
    co_return error;
  }
  if (value != nullptr) *value = result->value;
  Send(pgwire::Close{pgwire::Target::kStatement, kOwnStatement},
       OwnOwed(Awaited::kClose));
  Send(pgwire::Sync{}, OwnOwed(Awaited::kSync));
  co_return absl::OkStatus();
}

asio::awaitable<bool> ClientSession::Drain() {
  if (!co_await FlushUpstream()) co_return false;
  while (!queue_.empty() && !closed_) {
    boost::system::error_code ec;
    room_.expires_at(asio::steady_timer::time_point::max());
    co_await room_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  co_return !closed_;
}

asio::awaitable<absl::Status> ClientSession::ChangeFence(std::string domain,
                                                         uint64_t token) {
  if (read_role_) {
    if (token == 0) {  // a domain alone: nothing to hold
      domain_ = std::move(domain);
      co_return absl::OkStatus();
    }
    co_return absl::FailedPreconditionError(
        "a session that began without a token runs as the route's read role "
        "and cannot take one: connect again with fencegate.domain and "
        "fencegate.token in the startup options");
  }
  // Admitted under the policy, and the new token checked against this
  // gateway's fence, before anything moves: refused, the session keeps the
  // hold it has.
  std::swap(domain_, domain);
  std::swap(token_, token);
  absl::Status admitted = AdmitSession();
  if (admitted.ok() && token_ != 0) admitted = co_await CheckLocally();
  std::swap(domain_, domain);
  std::swap(token_, token);
  if (!admitted.ok()) co_return admitted;
  const std::string& schema = route_->spec.options.fence_schema;
  // One batch, one round trip: the old domain released, then the new hold
  // (which raises the database's fence to the new token, keeps it if
  // equal, and holds nothing if it is above), each in a transaction of its
  // own. Only hold()'s row has a column (release()'s is selected FROM), so
  // its value is the batch's.
  std::vector<UpstreamStatement> move;
  if (holding_) {
    move.push_back({postgres::ReleaseSql(schema), {domain_, secret_}});
  }
  holding_ = false;
  raise_waiting_ = false;
  domain_ = std::move(domain);
  token_ = token;
  if (token_ == 0) {  // nothing to hold
    if (move.empty()) co_return absl::OkStatus();
    co_return co_await RunOwn(move, nullptr);
  }
  move.push_back({"BEGIN ISOLATION LEVEL READ COMMITTED, READ WRITE", {}});
  move.push_back(
      {postgres::HoldSql(schema), {domain_, absl::StrCat(token_), secret_}});
  move.push_back({"COMMIT", {}});
  std::optional<std::string> value;
  if (absl::Status s = co_await RunOwn(move, &value); !s.ok()) co_return s;
  if (absl::Status s = Held(value); !s.ok()) co_return s;
  co_return absl::OkStatus();
}

void ClientSession::OnRaiseWaiting() {
  if (!holding_ || closed_ || ending_) return;
  raise_waiting_ = true;
  MaybeGiveUp();
}

void ClientSession::MaybeGiveUp() {
  if (!holding_ || !raise_waiting_ || giving_up_ || closed_ || ending_ ||
      !queue_.empty() || !tracker_.idle() || !upstream_out_.empty()) {
    return;
  }
  giving_up_ = true;
  Log(LogSeverity::kInfo,
      absl::StrCat("pg port: session ", process_id_, " gives up domain \"",
                   absl::CHexEscape(domain_), "\" at token ", token_,
                   ": a raise waits for it"));
  // Closing the server connection releases the hold at once.
  const std::string message = absl::StrCat(
      "terminating the session: the fence of domain \"", domain_,
      "\" is being raised past token ", token_,
      ", which is stale from now on; take the lock again and start a new "
      "session with the new token");
  asio::co_spawn(
      client_.get_executor(),
      [self = shared_from_this(), message]() -> asio::awaitable<void> {
        co_await self->Fatal(postgres::kStaleSqlState, message);
      },
      asio::detached);
}

}  // namespace fencegate::pgport
