// Copyright fencegate authors.
//
// A session's start (startup packet, sign-in, route, upstream connection,
// settings) and end, and its writes to the client.

#include "pgport/client_session.h"

#include <openssl/rand.h>

#include <utility>
#include <variant>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fencegate/common/limits.h"
#include "observability/log.h"
#include "pgport/sql_quote.h"
#include "pgwire/backend.h"
#include "pgwire/startup.h"
#include "postgres/fence_token.h"
#include "postgres/session_sql.h"
#include "postgres/sqlstates.h"
#include "security/peer_identity.h"
#include "security/request_gate.h"
#include "security/scram.h"

namespace fencegate::pgport {
namespace {

std::string RandomBase64(size_t bytes) {
  std::string raw(bytes, '\0');
  RAND_bytes(reinterpret_cast<unsigned char*>(raw.data()),
             static_cast<int>(raw.size()));
  return absl::Base64Escape(raw);
}

bool IsSettingName(absl::string_view name) {
  if (name.empty() || name.size() > 63 * 2) return false;
  if (!absl::ascii_isalpha(static_cast<unsigned char>(name[0])) &&
      name[0] != '_') {
    return false;
  }
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' &&
        c != '.') {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::Status ParseGatewaySetting(absl::string_view name,
                                 absl::string_view value, std::string* domain,
                                 uint64_t* token) {
  if (name == "domain") {
    if (absl::Status s = ValidateDomain(value, "fencegate.domain"); !s.ok()) {
      return s;
    }
    *domain = std::string(value);
    return absl::OkStatus();
  }
  if (name == "token") {
    uint64_t t = 0;
    if (!absl::SimpleAtoi(value, &t)) {
      return absl::InvalidArgumentError(
          absl::StrCat("fencegate.token must be a number, not \"",
                       absl::CHexEscape(value), "\""));
    }
    if (absl::Status s = ValidateToken(t, "fencegate.token"); !s.ok()) return s;
    if (absl::Status s = postgres::CheckFenceToken(t, "fencegate.token");
        !s.ok()) {
      return s;
    }
    *token = t;
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown setting fencegate.", name,
                   ": the gateway's are fencegate.domain and fencegate.token"));
}

ClientSession::ClientSession(PortState& port, tcp::socket client,
                             int32_t process_id, int32_t secret_key)
    : port_(port),
      client_(std::move(client)),
      client_reader_(port.options.max_message_bytes, port.context.memory),
      process_id_(process_id),
      secret_key_(secret_key),
      client_drained_(client_.get_executor()),
      room_(client_.get_executor()) {}

asio::awaitable<void> ClientSession::Run() {
  auto self = shared_from_this();
  asio::steady_timer deadline(client_.get_executor());
  if (port_.options.startup_timeout > absl::ZeroDuration()) {
    deadline.expires_after(
        absl::ToChronoMilliseconds(port_.options.startup_timeout));
    deadline.async_wait([this, self](boost::system::error_code ec) {
      if (ec) return;  // cancelled: the session started
      Log(LogSeverity::kWarning,
          absl::StrCat("pg port: session ", process_id_,
                       " closed: not signed in within ",
                       absl::FormatDuration(port_.options.startup_timeout)));
      Close();
    });
  }
  const bool started = co_await Start();
  deadline.cancel();
  if (!started) {
    Close();
    co_return;
  }
  signed_in_ = true;
  last_client_message_ = std::chrono::steady_clock::now();
  last_server_message_ = last_client_message_;
  asio::co_spawn(client_.get_executor(), Keep(self, &ClientSession::ReplyLoop),
                 asio::detached);
  if (port_.options.idle_transaction_timeout > absl::ZeroDuration() ||
      route_->spec.options.statement_timeout_ms > 0) {
    asio::co_spawn(client_.get_executor(), Keep(self, &ClientSession::Watchdog),
                   asio::detached);
  }
  co_await ClientLoop();
}

asio::awaitable<void> ClientSession::Keep(
    std::shared_ptr<ClientSession> self,
    asio::awaitable<void> (ClientSession::*loop)()) {
  co_await (self.get()->*loop)();
}

asio::awaitable<bool> ClientSession::Start() {
  const pgwire::StartupMessage* startup = nullptr;
  pgwire::StartupPacket packet;
  for (;;) {
    absl::StatusOr<pgwire::Frame> frame =
        co_await client_reader_.Next(client_, /*startup=*/true);
    if (!frame.ok()) {
      if (!absl::IsUnavailable(frame.status())) {
        co_await Fatal(postgres::kProtocolViolationSqlState,
                       frame.status().message());
      }
      co_return false;
    }
    absl::StatusOr<pgwire::StartupPacket> parsed =
        pgwire::ParseStartupPacket(frame->body);
    if (!parsed.ok()) {
      co_await Fatal(postgres::kProtocolViolationSqlState,
                     parsed.status().message());
      co_return false;
    }
    packet = *std::move(parsed);
    if (std::holds_alternative<pgwire::SslRequest>(packet)) {
      if (!co_await OnSslRequest()) co_return false;
      continue;
    }
    if (std::holds_alternative<pgwire::GssEncRequest>(packet)) {
      co_await ToClient("N");  // GSSAPI encryption is not served.
      continue;
    }
    if (const auto* cancel = std::get_if<pgwire::CancelRequest>(&packet)) {
      auto it = port_.sessions.find(cancel->process_id);
      if (it != port_.sessions.end()) {
        if (std::shared_ptr<ClientSession> target = it->second.lock();
            target != nullptr && target->secret_key() == cancel->secret_key) {
          target->Cancel();
        }
      }
      co_return false;
    }
    startup = &std::get<pgwire::StartupMessage>(packet);
    break;
  }
  if (port_.tls != nullptr && !client_.tls()) {
    co_await Fatal(postgres::kInvalidAuthorizationSqlState,
                   "the gateway's PostgreSQL port serves TLS only: connect "
                   "with sslmode=require (or prefer, libpq's default)");
    co_return false;
  }
  std::string database;
  for (const auto& [name, value] : startup->parameters) {
    if (name == "user") {
      user_ = std::string(value);
    } else if (name == "database") {
      database = std::string(value);
    } else if (name == "replication") {
      co_await Fatal(postgres::kFeatureNotSupportedSqlState,
                     "replication connections are not served by the gateway");
      co_return false;
    } else if (name == "options") {
      absl::StatusOr<std::vector<pgwire::StartupOption>> options =
          pgwire::ParseStartupOptions(value);
      if (!options.ok()) {
        co_await Fatal(postgres::kInvalidParameterSqlState,
                       options.status().message());
        co_return false;
      }
      for (pgwire::StartupOption& option : *options) {
        const std::string lower = absl::AsciiStrToLower(option.name);
        if (absl::StartsWith(lower, "fencegate.")) {
          if (absl::Status s = ParseGatewaySetting(
                  lower.substr(10), option.value, &domain_, &token_);
              !s.ok()) {
            co_await Fatal(postgres::kInvalidParameterSqlState, s.message());
            co_return false;
          }
        } else {
          settings_.emplace_back(std::move(option.name),
                                 std::move(option.value));
        }
      }
    } else {
      settings_.emplace_back(std::string(name), std::string(value));
    }
  }
  if (database.empty()) database = user_;
  // The pinned settings are the upstream connection's own (upstream.h):
  // a client's value is refused unless it is the pinned one. SQL_ASCII, a
  // C locale's client_encoding, passes bytes as they are, which UTF8 reads
  // the same way for every byte the parser accepts.
  for (auto it = settings_.begin(); it != settings_.end();) {
    const std::string lower = absl::AsciiStrToLower(it->first);
    if (!postgres::IsPinnedSetting(lower)) {
      ++it;
      continue;
    }
    if (!postgres::KeepsPin(lower, it->second) &&
        !(lower == "client_encoding" &&
          absl::AsciiStrToLower(it->second) == "sql_ascii")) {
      co_await Fatal(postgres::kInvalidParameterSqlState,
                     postgres::PinnedReason(lower));
      co_return false;
    }
    it = settings_.erase(it);
  }
  for (const auto& [name, value] : settings_) {
    if (!IsSettingName(name)) {
      co_await Fatal(postgres::kInvalidParameterSqlState,
                     absl::StrCat("invalid setting name \"",
                                  absl::CHexEscape(name), "\""));
      co_return false;
    }
    if (token_ == 0 && postgres::IsReadOnlySetting(name)) {
      co_await Fatal(postgres::kReadOnlyTransactionSqlState,
                     absl::StrCat(name,
                                  " cannot be set by a session without "
                                  "fencegate.token: it is read-only"));
      co_return false;
    }
  }
  if (token_ != 0 && domain_.empty()) {
    co_await Fatal(postgres::kInvalidParameterSqlState,
                   "fencegate.token needs fencegate.domain: the domain is "
                   "the lock's name");
    co_return false;
  }
  // Signed in first: the routes are named only to a known user.
  if (absl::Status s = co_await Authenticate(); !s.ok()) {
    co_await Fatal(absl::IsPermissionDenied(s)
                       ? postgres::kInvalidPasswordSqlState
                       : postgres::kInvalidAuthorizationSqlState,
                   s.message());
    co_return false;
  }
  auto route = port_.routes.find(database);
  if (route == port_.routes.end()) {
    std::vector<std::string> names;
    for (const auto& [name, unused] : port_.routes) names.push_back(name);
    std::sort(names.begin(), names.end());
    // Built before the co_await: GCC 12 destroys a temporary made in one arm
    // of a conditional inside a co_await expression twice (the crash of a
    // startup packet naming no route).
    std::string routes = names.empty() ? "none" : absl::StrJoin(names, ", ");
    const std::string message =
        absl::StrCat("database \"", database,
                     "\" is not a PostgreSQL route of this gateway; its "
                     "PostgreSQL routes: ",
                     routes);
    co_await Fatal(postgres::kInvalidCatalogNameSqlState, message);
    co_return false;
  }
  route_ = &route->second;
  resource_ = absl::StrCat(route_->spec.name, "/");
  if (absl::Status s = AdmitSession(); !s.ok()) {
    co_await Fatal(absl::IsUnauthenticated(s)
                       ? postgres::kInvalidAuthorizationSqlState
                       : postgres::kInsufficientPrivilegeSqlState,
                   s.message());
    co_return false;
  }
  // A session without a token runs as the route's read role, which
  // PostgreSQL keeps from writing; a route without one refuses it.
  read_role_ = token_ == 0;
  if (read_role_ && !route_->read_target.has_value()) {
    co_await Fatal(
        postgres::kInvalidAuthorizationSqlState,
        absl::StrCat("route \"", route_->spec.name,
                     "\" serves no session without a token: set "
                     "fencegate.domain and fencegate.token in the startup "
                     "options (options='-c fencegate.domain=... -c "
                     "fencegate.token=...'), or give the route a read role "
                     "(read_user, docs/pgwire.md)"));
    co_return false;
  }
  const UpstreamTarget& target =
      read_role_ ? *route_->read_target : route_->target;
  UpstreamPool& pool = read_role_ ? *route_->read_pool : *route_->pool;
  // A pooled connection may have been closed by its server meanwhile: the
  // hold's round trip (the setup's, for the read role) finds out, and a
  // new connection is made once. The hold comes before the client's
  // settings and messages.
  const std::string setup = SetupSql();
  for (int attempt = 0; attempt < 2 && upstream_ == nullptr; ++attempt) {
    std::unique_ptr<Upstream> upstream = attempt == 0 ? pool.Take() : nullptr;
    const bool pooled = upstream != nullptr;
    if (!pooled) {
      absl::StatusOr<std::unique_ptr<Upstream>> made =
          co_await Upstream::Connect(target, port_.options.max_message_bytes,
                                     port_.context.memory);
      if (!made.ok()) {
        co_await Fatal(postgres::kConnectionFailureSqlState,
                       absl::StrCat("route \"", route_->spec.name,
                                    "\": ", made.status().message()));
        co_return false;
      }
      upstream = *std::move(made);
    }
    absl::Status s = absl::OkStatus();
    if (!read_role_) {
      s = co_await Hold(
          [&upstream](const std::vector<UpstreamStatement>& statements,
                      std::optional<std::string>* value) {
            return upstream->RunExtended(statements, value);
          });
    }
    if (s.ok()) s = co_await upstream->Run(setup);
    if (s.ok()) {
      upstream_ = std::move(upstream);
    } else if (!pooled || !absl::IsUnavailable(s)) {
      holding_ = false;
      const absl::string_view sqlstate =
          RefusalSqlState(s, postgres::kConnectionFailureSqlState);
      std::string message =
          sqlstate == postgres::kConnectionFailureSqlState
              ? absl::StrCat("route \"", route_->spec.name, "\": ", s.message())
              : std::string(s.message());
      co_await Fatal(sqlstate, message);
      co_return false;
    }
  }
  if (upstream_ == nullptr) {
    co_await Fatal(postgres::kConnectionFailureSqlState,
                   absl::StrCat("route \"", route_->spec.name,
                                "\": no connection could be made"));
    co_return false;
  }
  std::string hello = pgwire::Encode(pgwire::Authentication{0, {}});
  for (const auto& [name, value] : upstream_->parameters()) {
    absl::StrAppend(&hello,
                    pgwire::Encode(pgwire::ParameterStatus{name, value}));
  }
  absl::StrAppend(
      &hello, pgwire::Encode(pgwire::BackendKeyData{process_id_, secret_key_}),
      pgwire::Encode(pgwire::ReadyForQuery{pgwire::TransactionStatus::kIdle}));
  co_await ToClient(std::move(hello));
  Log(LogSeverity::kInfo,
      absl::StrCat(
          "pg port: session ", process_id_, " of user \"",
          absl::CHexEscape(user_), "\" on route \"", route_->spec.name, "\"",
          token_ != 0 ? absl::StrCat(", domain \"", absl::CHexEscape(domain_),
                                     "\" token ", token_)
                      : std::string(", read-only")));
  co_return !closed_;
}

asio::awaitable<bool> ClientSession::OnSslRequest() {
  if (port_.tls == nullptr || client_.tls()) {
    co_await ToClient("N");
    co_return true;
  }
  // Bytes sent after the request but before the handshake would be read as
  // if they had come over TLS.
  if (client_reader_.pending_bytes() != 0) {
    co_await Fatal(postgres::kProtocolViolationSqlState,
                   "unencrypted bytes after SSLRequest");
    co_return false;
  }
  co_await ToClient("S");
  if (absl::Status s = co_await client_.StartTls(port_.tls->Context());
      !s.ok()) {
    Log(LogSeverity::kWarning,
        absl::StrCat("pg port: session ", process_id_, ": ", s.message()));
    co_return false;
  }
  if (port_.tls->checks_revocation() && client_.peer_certificate() != nullptr) {
    if (absl::Status s = co_await CheckRevocation(); !s.ok()) {
      co_await Fatal(postgres::kInvalidAuthorizationSqlState, s.message());
      co_return false;
    }
  }
  identity_ = CertificateIdentity(client_.peer_certificate());
  co_return true;
}

asio::awaitable<absl::Status> ClientSession::CheckRevocation() {
  co_return co_await asio::async_initiate<decltype(asio::use_awaitable),
                                          void(absl::Status)>(
      [this](auto handler) {
        port_.context.run_blocking(
            [tls = port_.tls.get(), leaf = client_.PeerCertificatePem(),
             chain = client_.PeerChainPem(), handler = std::move(handler),
             executor = client_.get_executor()]() mutable {
              absl::Status status = tls->CheckRevocation(leaf, chain);
              asio::post(executor, [handler = std::move(handler),
                                    status = std::move(status)]() mutable {
                std::move(handler)(status);
              });
            });
      },
      asio::use_awaitable);
}

absl::Status ClientSession::AdmitSession() const {
  const RequestGate* gate = port_.context.gate;
  if (gate == nullptr || !gate->has_policy()) return absl::OkStatus();
  if (domain_.empty()) {
    return absl::PermissionDeniedError(
        "under the gateway's policy a session needs fencegate.domain, even "
        "to read: the policy grants domains");
  }
  absl::StatusOr<std::unique_ptr<Admission>> admission = gate->AdmitIdentity(
      identity_, PgTransactionFacts(domain_, token_, resource_));
  return admission.status();
}

asio::awaitable<absl::Status> ClientSession::Authenticate() {
  if (!identity_.empty()) {
    co_return absl::OkStatus();  // signed in by its certificate
  }
  if (port_.options.require_client_certificate) {
    co_return absl::UnauthenticatedError(
        "no client identity: a certificate with a URI SAN, DNS SAN or CN is "
        "required");
  }
  if (port_.options.users == nullptr) co_return absl::OkStatus();
  // An unknown user goes through the same exchange against a verifier
  // nobody knows, so the answer does not tell who exists.
  const ScramVerifier* known = port_.options.users->Find(user_);
  ScramVerifier verifier;
  if (known != nullptr) {
    verifier = *known;
  } else {
    absl::StatusOr<ScramVerifier> unknown = ParseScramVerifier(
        MakeScramVerifier(RandomBase64(24), RandomBase64(12), 4096));
    if (unknown.ok()) verifier = *unknown;
  }
  ScramServer scram(verifier, RandomBase64(18));
  co_await ToClient(pgwire::Encode(
      pgwire::Authentication{10, absl::string_view("SCRAM-SHA-256\0\0", 15)}));
  for (int step = 0; step < 2; ++step) {
    absl::StatusOr<pgwire::Frame> frame = co_await client_reader_.Next(client_);
    if (!frame.ok()) co_return frame.status();
    absl::StatusOr<pgwire::FrontendMessage> message =
        pgwire::ParseFrontendMessage(*frame);
    if (!message.ok()) co_return message.status();
    const auto* password = std::get_if<pgwire::PasswordMessage>(&*message);
    if (password == nullptr) {
      co_return absl::InvalidArgumentError(
          "expected the SASL response of SCRAM-SHA-256");
    }
    if (step == 0) {
      absl::StatusOr<pgwire::SaslInitialResponse> initial =
          pgwire::ParseSaslInitialResponse(*password);
      if (!initial.ok()) co_return initial.status();
      if (initial->mechanism != "SCRAM-SHA-256" || !initial->data.has_value()) {
        co_return absl::InvalidArgumentError(
            "the only SASL mechanism served is SCRAM-SHA-256");
      }
      absl::StatusOr<std::string> first = scram.Start(*initial->data);
      if (!first.ok()) co_return first.status();
      co_await ToClient(pgwire::Encode(pgwire::Authentication{11, *first}));
    } else {
      absl::StatusOr<std::string> final = scram.Finish(password->data);
      if (!final.ok() || known == nullptr) {
        co_return absl::PermissionDeniedError(
            absl::StrCat("password authentication failed for user \"",
                         absl::CHexEscape(user_), "\""));
      }
      co_await ToClient(pgwire::Encode(pgwire::Authentication{12, *final}));
    }
  }
  co_return absl::OkStatus();
}

std::string ClientSession::SetupSql() const {
  std::vector<std::string> statements;
  for (const auto& [name, value] : settings_) {
    statements.push_back(absl::StrCat("SET ", QuoteIdentifier(name), " = ",
                                      QuoteLiteral(value)));
  }
  if (token_ == 0)
    statements.push_back("SET default_transaction_read_only = on");
  if (statements.empty()) return "SELECT 1";
  return absl::StrJoin(statements, "; ");
}

asio::awaitable<void> ClientSession::Fatal(absl::string_view sqlstate,
                                           absl::string_view message) {
  if (closed_) co_return;
  co_await ToClient(pgwire::EncodeError("FATAL", sqlstate, message));
  Close();
}

asio::awaitable<void> ClientSession::ToClient(std::string bytes) {
  auto self = shared_from_this();
  client_out_.append(bytes);
  if (writing_client_) co_return;
  writing_client_ = true;
  while (!client_out_.empty() && client_.is_open()) {
    std::string chunk;
    chunk.swap(client_out_);
    writing_bytes_ = chunk.size();
    const bool written = (co_await client_.WriteAll(chunk)).ok();
    writing_bytes_ = 0;
    client_drained_.cancel();
    room_.cancel();
    if (!written) {
      client_out_.clear();
      break;
    }
  }
  writing_client_ = false;
  if (client_out_.empty()) {
    pending_reservation_ = MemoryBudget::Reservation();
    pending_reserved_ = 0;
  }
}

void ClientSession::Cancel() {
  if (upstream_ == nullptr || closed_) return;
  asio::co_spawn(client_.get_executor(),
                 CancelUpstream(upstream_->endpoint(), upstream_->process_id(),
                                upstream_->secret_key()),
                 asio::detached);
}

void ClientSession::Close() {
  if (closed_) return;
  closed_ = true;
  client_.Close();
  boost::system::error_code ec;
  if (upstream_ != nullptr) upstream_->socket().close(ec);
  // Whatever waits for room or for the client's reads ends now.
  client_drained_.cancel();
  room_.cancel();
  port_.sessions.erase(process_id_);
}

}  // namespace fencegate::pgport
