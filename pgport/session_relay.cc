// Copyright fencegate authors.
//
// A running session's client messages: each classified and sent upstream
// (session_upstream.cc) as it came, this gateway's fence checked at each
// transaction's start, or refused, or answered here (fencegate.* settings).
// The database's fence is held by the server connection (session_hold.cc):
// no statement is added to the client's transactions.

#include <chrono>
#include <utility>
#include <variant>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "fencegate/common/stale_token.h"
#include "fencegate/common/token_refused.h"
#include "observability/log.h"
#include "pgport/client_session.h"
#include "pgwire/backend.h"
#include "postgres/fence_schema.h"
#include "postgres/sql_parse.h"
#include "postgres/sqlstates.h"

namespace fencegate::pgport {
namespace {

using postgres::SessionEffect;

// The statement no client can prepare, whose Bind fails in place of a
// refused message (session_sql.h reserves the name).
constexpr char kRefusedName[] = "fencegate_refused";
// A Query the server refuses without touching anything, sent in place of a
// refused one inside a transaction, so that the transaction fails as the
// client expects.
constexpr char kFailingQuery[] = "fencegate refused";

// A token the domain's token rules refuse (policy.proto, Domain): not
// granted by the lease service, not its lock service's holder, or past
// max_advance.

bool Reserved(absl::string_view name) {
  return absl::StartsWith(name, postgres::kReservedNamePrefix);
}

pgwire::TransactionStatus StatusOf(const TransactionTracker& tracker) {
  return tracker.idle() ? pgwire::TransactionStatus::kIdle
                        : pgwire::TransactionStatus::kInTransaction;
}

}  // namespace

absl::string_view RefusalSqlState(const absl::Status& status,
                                  absl::string_view otherwise) {
  if (GetStaleToken(status).has_value()) return postgres::kStaleSqlState;
  if (GetTokenRefused(status).has_value()) {
    return postgres::kTokenRefusedSqlState;
  }
  switch (status.code()) {
    case absl::StatusCode::kUnauthenticated:
      return postgres::kInvalidAuthorizationSqlState;
    case absl::StatusCode::kPermissionDenied:
      return postgres::kInsufficientPrivilegeSqlState;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return postgres::kInvalidParameterSqlState;
    default:
      return otherwise;
  }
}

asio::awaitable<void> ClientSession::ClientLoop() {
  auto self = shared_from_this();
  while (!closed_ && !ending_ && !giving_up_) {
    if (!co_await WaitForRoom()) break;
    if (raise_waiting_ && tracker_.idle()) {
      // A raise waits for the held domain: no new transaction goes out.
      // Once the server has answered everything, its ReadyForQuery says
      // whether the session is between two transactions (it gives the
      // domain up) or inside a block (its client may finish it).
      if (!co_await FlushUpstream()) break;
      while (!queue_.empty() && !closed_) {
        boost::system::error_code ec;
        room_.expires_at(asio::steady_timer::time_point::max());
        co_await room_.async_wait(
            asio::redirect_error(asio::use_awaitable, ec));
      }
      MaybeGiveUp();
      if (giving_up_ || closed_) break;
    }
    absl::StatusOr<std::optional<pgwire::Frame>> buffered =
        client_reader_.Buffered();
    absl::StatusOr<pgwire::Frame> frame = absl::UnknownError("unread");
    if (!buffered.ok()) {
      frame = buffered.status();
    } else if (buffered->has_value()) {
      frame = **buffered;
    } else {
      // The batch read so far goes upstream in one write.
      if (!co_await FlushUpstream()) break;
      co_await ToClient({});
      frame = co_await client_reader_.Next(client_);
    }
    if (!frame.ok()) {
      if (absl::IsUnavailable(frame.status())) {
        EndUpstream();  // the client went away without a Terminate
      } else {
        co_await Fatal(client_reader_.out_of_memory()
                           ? postgres::kOutOfMemorySqlState
                       : absl::IsResourceExhausted(frame.status())
                           ? postgres::kProgramLimitSqlState
                           : postgres::kProtocolViolationSqlState,
                       frame.status().message());
      }
      break;
    }
    last_client_message_ = std::chrono::steady_clock::now();
    current_ = absl::string_view(frame->body.data() - pgwire::kHeaderBytes,
                                 frame->size);
    absl::StatusOr<pgwire::FrontendMessage> message =
        pgwire::ParseFrontendMessage(*frame);
    if (!message.ok()) {
      co_await Fatal(postgres::kProtocolViolationSqlState,
                     message.status().message());
      break;
    }
    if (!co_await OnMessage(*message)) break;
  }
  if (ending_) {
    co_await FlushUpstream();
    client_.Close();
  }
}

asio::awaitable<bool> ClientSession::OnMessage(
    const pgwire::FrontendMessage& message) {
  if (skipping_ && !std::holds_alternative<pgwire::Sync>(message)) {
    co_return true;  // the server skips them too, after the error
  }
  if (const auto* query = std::get_if<pgwire::Query>(&message)) {
    co_await OnQuery(query->sql);
  } else if (const auto* parse = std::get_if<pgwire::Parse>(&message)) {
    co_await OnParse(*parse);
  } else if (const auto* bind = std::get_if<pgwire::Bind>(&message)) {
    co_await OnBind(*bind);
  } else if (const auto* execute = std::get_if<pgwire::Execute>(&message)) {
    co_await OnExecute(*execute);
  } else if (const auto* describe = std::get_if<pgwire::Describe>(&message)) {
    Forward(ClientOwed(describe->target == pgwire::Target::kStatement
                           ? Awaited::kDescribeStatement
                           : Awaited::kDescribePortal));
  } else if (const auto* close = std::get_if<pgwire::Close>(&message)) {
    if (Reserved(close->name)) {
      RefuseExtended(
          postgres::kDuplicatePreparedSqlState,
          absl::StrCat("names starting with ", postgres::kReservedNamePrefix,
                       " are the gateway's"));
      co_return true;
    }
    (close->target == pgwire::Target::kStatement ? statements_ : portals_)
        .erase(std::string(close->name));
    Forward(ClientOwed(Awaited::kClose));
  } else if (std::holds_alternative<pgwire::Sync>(message)) {
    skipping_ = false;
    tracker_.EndOfBatch();
    Forward(ClientOwed(Awaited::kSync));
  } else if (std::holds_alternative<pgwire::Terminate>(message)) {
    EndUpstream();
    co_return false;
  } else if (std::holds_alternative<pgwire::PasswordMessage>(message)) {
    co_await Fatal(postgres::kProtocolViolationSqlState,
                   "unexpected password message in a running session");
    co_return false;
  } else {
    // Flush and the COPY messages: nothing is owed for them.
    absl::StrAppend(&upstream_out_, current_);
  }
  co_return true;
}

asio::awaitable<void> ClientSession::OnQuery(absl::string_view sql) {
  absl::StatusOr<std::vector<Statement>> statements = co_await Classify(sql);
  if (!statements.ok()) {
    RefuseQuery(postgres::kSyntaxErrorSqlState, statements.status().message());
    co_return;
  }
  if (statements->empty()) {
    Forward(ClientOwed(Awaited::kQuery));
    co_return;
  }
  size_t settings = 0;
  for (const Statement& s : *statements) {
    if (s.effect == SessionEffect::kGatewaySet ||
        s.effect == SessionEffect::kGatewayShow) {
      ++settings;
    }
  }
  if (settings == statements->size()) {
    co_await AnswerSettings(*statements);
    co_return;
  }
  if (settings > 0) {
    RefuseQuery(postgres::kFeatureNotSupportedSqlState,
                "SET and SHOW of fencegate.* must be sent as a query of their "
                "own, not with other statements");
    co_return;
  }
  for (const Statement& s : *statements) {
    if (s.effect == SessionEffect::kRefused) {
      RefuseQuery(postgres::kFeatureNotSupportedSqlState, s.reason);
      co_return;
    }
    if (token_ == 0 && s.lifts_read_only) {
      RefuseQuery(postgres::kReadOnlyTransactionSqlState,
                  absl::StrCat("a session without fencegate.token is "
                               "read-only, and \"",
                               s.text,
                               "\" would let it write; connect with "
                               "fencegate.token to write"));
      co_return;
    }
  }
  // Where a transaction begins, this gateway's fence is checked (the
  // database's is held by the connection whatever the prediction).
  TransactionTracker plan = tracker_;
  bool begins = false;
  for (const Statement& s : *statements) {
    begins = plan.BeginsBefore(s) || begins;
    begins = plan.BeginsAfter(s) || begins;
  }
  plan.EndOfBatch();
  if (begins && token_ != 0) {
    if (absl::Status s = co_await CheckLocally(); !s.ok()) {
      RefuseQuery(RefusalSqlState(s), s.message(), StaleDetail(s));
      co_return;
    }
  }
  tracker_ = plan;
  Forward(ClientOwed(Awaited::kQuery));
}

asio::awaitable<void> ClientSession::AnswerSettings(
    const std::vector<Statement>& statements) {
  std::string reply;
  for (const Statement& s : statements) {
    if (s.effect == SessionEffect::kGatewaySet) {
      if (!tracker_.idle()) {
        RefuseQuery(postgres::kActiveTransactionSqlState,
                    absl::StrCat("SET fencegate.", s.setting,
                                 " cannot run inside a transaction: the "
                                 "transaction was fenced with the token it "
                                 "began with"));
        co_return;
      }
      std::string domain = domain_;
      uint64_t token = token_;
      absl::Status parsed =
          ParseGatewaySetting(s.setting, s.value, &domain, &token);
      if (parsed.ok() && token != 0 && domain.empty()) {
        parsed = absl::InvalidArgumentError(
            "fencegate.token needs fencegate.domain: the domain is the "
            "lock's name");
      }
      if (!parsed.ok()) {
        absl::StrAppend(
            &reply,
            pgwire::EncodeError("ERROR", postgres::kInvalidParameterSqlState,
                                parsed.message()));
        break;
      }
      if (domain != domain_ || token != token_) {
        // The connection's hold moves once the server owes nothing, when
        // its ReadyForQuery says the session is between two transactions.
        if (!co_await Drain()) co_return;
        if (!tracker_.idle()) {
          RefuseQuery(postgres::kActiveTransactionSqlState,
                      absl::StrCat("SET fencegate.", s.setting,
                                   " cannot run inside a transaction"));
          co_return;
        }
        if (absl::Status c = co_await ChangeFence(domain, token); !c.ok()) {
          if (token_ != 0 && !holding_) {
            // The old hold is gone and no new one was taken: the session
            // holds nothing and ends.
            co_await Fatal(
                RefusalSqlState(c, postgres::kConnectionFailureSqlState),
                c.message());
            co_return;
          }
          // A read role's session may not take a token: read-only.
          absl::StrAppend(
              &reply,
              pgwire::EncodeError(
                  "ERROR",
                  read_role_ ? postgres::kReadOnlyTransactionSqlState
                             : RefusalSqlState(
                                   c, postgres::kConnectionFailureSqlState),
                  c.message(), StaleDetail(c)));
          break;
        }
      }
      absl::StrAppend(&reply, pgwire::Encode(pgwire::CommandComplete{"SET"}));
    } else {
      const std::string name = absl::StrCat("fencegate.", s.setting);
      const std::string value = s.setting == "token"
                                    ? (token_ != 0 ? absl::StrCat(token_) : "")
                                    : domain_;
      pgwire::Column column;
      column.name = name;
      column.type_oid = 25;  // text
      column.type_size = -1;
      column.type_modifier = -1;
      absl::StrAppend(
          &reply, pgwire::Encode(pgwire::RowDescription{{column}}),
          pgwire::Encode(pgwire::DataRow{{absl::string_view(value)}}),
          pgwire::Encode(pgwire::CommandComplete{"SHOW"}));
    }
  }
  absl::StrAppend(&reply,
                  pgwire::Encode(pgwire::ReadyForQuery{StatusOf(tracker_)}));
  queue_.Push(LocalReply(std::move(reply)), &client_out_);
}

asio::awaitable<void> ClientSession::OnParse(const pgwire::Parse& parse) {
  if (Reserved(parse.statement)) {
    RefuseExtended(
        postgres::kDuplicatePreparedSqlState,
        absl::StrCat("names starting with ", postgres::kReservedNamePrefix,
                     " are the gateway's"));
    co_return;
  }
  Statement statement;
  absl::StatusOr<std::vector<Statement>> statements =
      co_await Classify(parse.sql);
  // What the gateway cannot read is refused, never forwarded: the server
  // might read it otherwise (a tree deeper than the parser's bound).
  if (!statements.ok()) {
    RefuseExtended(postgres::kSyntaxErrorSqlState,
                   statements.status().message());
    co_return;
  }
  if (statements->size() > 1) {
    RefuseExtended(postgres::kSyntaxErrorSqlState,
                   "cannot insert multiple commands into a prepared "
                   "statement");
    co_return;
  }
  if (statements->size() == 1) {
    statement = (*statements)[0];
    statement.text = {};
    if (statement.effect == SessionEffect::kGatewaySet ||
        statement.effect == SessionEffect::kGatewayShow) {
      RefuseExtended(postgres::kFeatureNotSupportedSqlState,
                     "SET and SHOW of fencegate.* are served only as a simple "
                     "query");
      co_return;
    }
    if (statement.effect == SessionEffect::kRefused) {
      RefuseExtended(postgres::kFeatureNotSupportedSqlState, statement.reason);
      co_return;
    }
    if (token_ == 0 && statement.lifts_read_only) {
      RefuseExtended(postgres::kReadOnlyTransactionSqlState,
                     "a session without fencegate.token is read-only, and "
                     "this statement would let it write; connect with "
                     "fencegate.token to write");
      co_return;
    }
  }
  statements_[std::string(parse.statement)] = std::move(statement);
  Forward(ClientOwed(Awaited::kParse));
}

asio::awaitable<void> ClientSession::OnBind(const pgwire::Bind& bind) {
  if (Reserved(bind.portal) || Reserved(bind.statement)) {
    RefuseExtended(
        postgres::kDuplicatePreparedSqlState,
        absl::StrCat("names starting with ", postgres::kReservedNamePrefix,
                     " are the gateway's"));
    co_return;
  }
  auto known = statements_.find(std::string(bind.statement));
  Statement statement =
      known != statements_.end() ? known->second : Statement{};
  TransactionTracker plan = tracker_;
  if (plan.BeginsBefore(statement) && token_ != 0) {
    if (absl::Status s = co_await CheckLocally(); !s.ok()) {
      RefuseExtended(RefusalSqlState(s), s.message(), StaleDetail(s));
      co_return;
    }
  }
  tracker_ = plan;
  portals_[std::string(bind.portal)] = statement;
  Forward(ClientOwed(Awaited::kBind));
}

asio::awaitable<void> ClientSession::OnExecute(const pgwire::Execute& execute) {
  auto known = portals_.find(std::string(execute.portal));
  const Statement statement =
      known != portals_.end() ? known->second : Statement{};
  Forward(ClientOwed(Awaited::kExecute));
  TransactionTracker plan = tracker_;
  if (plan.BeginsAfter(statement) && token_ != 0) {
    if (absl::Status s = co_await CheckLocally(); !s.ok()) {
      RefuseExtended(RefusalSqlState(s), s.message(), StaleDetail(s));
      co_return;
    }
  }
  tracker_ = plan;
}

asio::awaitable<absl::StatusOr<std::vector<ClientSession::Statement>>>
ClientSession::Classify(absl::string_view sql) {
  if (sql.size() <= kInlineClassifyBytes)
    co_return port_.sql->ClassifySession(sql);
  // `sql` points into the client reader's buffer, which stays as it is
  // while this session waits here (nothing else reads its client).
  auto self = shared_from_this();
  co_return co_await asio::async_initiate<
      decltype(asio::use_awaitable),
      void(absl::StatusOr<std::vector<Statement>>)>(
      [self, sql](auto handler) {
        postgres::RunOnLongTextParser(
            [sql, handler = std::move(handler),
             executor = self->client_.get_executor()]() mutable {
              absl::StatusOr<std::vector<Statement>> statements =
                  postgres::ClassifySessionSql(sql);
              asio::post(executor,
                         [handler = std::move(handler),
                          statements = std::move(statements)]() mutable {
                           std::move(handler)(std::move(statements));
                         });
            });
      },
      asio::use_awaitable);
}

asio::awaitable<absl::Status> ClientSession::CheckLocally() {
  std::unique_ptr<Admission> admission;
  if (const RequestGate* gate = port_.context.gate; gate != nullptr) {
    absl::StatusOr<std::unique_ptr<Admission>> admitted = gate->AdmitIdentity(
        identity_, PgTransactionFacts(domain_, token_, resource_));
    if (!admitted.ok()) co_return admitted.status();
    admission = *std::move(admitted);
  }
  const AdvanceCheck* check =
      admission != nullptr ? admission->advance_check() : nullptr;
  Fencer* fencer = port_.context.fencer;
  absl::StatusOr<FenceDecision> decision =
      co_await asio::async_initiate<decltype(asio::use_awaitable),
                                    void(absl::StatusOr<FenceDecision>)>(
          [this, fencer, check](auto handler) {
            auto executor = client_.get_executor();
            Fencer::AsyncApply apply = [](Fencer::Applied applied) {
              // Nothing is applied in the turn: the transaction is sent once
              // the advance is durable, and the database's fence row orders it
              // against every later raise.
              std::move(applied)(absl::OkStatus());
            };
            Fencer::DecisionCallback done =
                [handler = std::move(handler),
                 executor](absl::StatusOr<FenceDecision> decision) mutable {
                  asio::post(executor,
                             [handler = std::move(handler),
                              decision = std::move(decision)]() mutable {
                               std::move(handler)(std::move(decision));
                             });
                };
            ExecuteAsyncOptions options;
            options.check = check;
            options.apply_never_blocks = true;
            fencer->Submit(domain_, token_, std::move(apply), std::move(done),
                           std::move(options));
          },
          asio::use_awaitable);
  if (admission != nullptr) admission->Audit(decision);
  co_return decision.status();
}

void ClientSession::RefuseQuery(absl::string_view sqlstate,
                                absl::string_view message,
                                absl::string_view detail) {
  std::string error = pgwire::EncodeError("ERROR", sqlstate, message, detail);
  if (tracker_.idle()) {
    // Nothing reaches the server.
    queue_.Push(
        LocalReply(absl::StrCat(error, pgwire::Encode(pgwire::ReadyForQuery{
                                           pgwire::TransactionStatus::kIdle}))),
        &client_out_);
    return;
  }
  Send(pgwire::Query{kFailingQuery},
       Replacing(Awaited::kQuery, std::move(error)));
}

void ClientSession::RefuseExtended(absl::string_view sqlstate,
                                   absl::string_view message,
                                   absl::string_view detail) {
  pgwire::Bind bind;
  bind.statement = kRefusedName;
  Send(bind, Replacing(Awaited::kBind, pgwire::EncodeError("ERROR", sqlstate,
                                                           message, detail)));
  skipping_ = true;
}

}  // namespace fencegate::pgport
