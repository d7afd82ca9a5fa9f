// Copyright fencegate authors.

#include "pgport/upstream.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <optional>
#include <variant>

#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "libpq-fe.h"
#include "pgwire/backend.h"
#include "pgwire/message_builder.h"
#include "pgwire/startup.h"
#include "postgres/fence_hold.h"
#include "postgres/sqlstates.h"
#include "security/scram.h"

namespace fencegate::pgport {
namespace {

std::string Md5Hex(absl::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), out, &n, EVP_md5(), nullptr);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(out), n));
}

std::string RandomNonce() {
  unsigned char bytes[18];
  RAND_bytes(bytes, sizeof(bytes));
  return absl::Base64Escape(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

std::string PasswordMessage(absl::string_view data) {
  return pgwire::MessageBuilder('p').Bytes(data).Finish();
}

// The server's error: its message, and its SQLSTATE.
absl::Status ServerError(const pgwire::Frame& frame, absl::string_view when) {
  absl::StatusOr<pgwire::BackendMessage> m = pgwire::ParseBackendMessage(frame);
  std::string text = "an error it did not explain";
  if (m.ok() && std::holds_alternative<pgwire::ErrorResponse>(*m)) {
    const auto& e = std::get<pgwire::ErrorResponse>(*m);
    const absl::string_view* message = e.Find('M');
    const absl::string_view* code = e.Find('C');
    text = absl::StrCat(message ? *message : "", " (SQLSTATE ",
                        code ? *code : "?", ")");
    if (code != nullptr && (*code == postgres::kInvalidPasswordSqlState ||
                            *code == postgres::kInvalidAuthorizationSqlState)) {
      return absl::PermissionDeniedError(
          absl::StrCat("the route's server refused ", when, ": ", text));
    }
  }
  absl::Status status = absl::FailedPreconditionError(
      absl::StrCat("the route's server refused ", when, ": ", text));
  if (m.ok() && std::holds_alternative<pgwire::ErrorResponse>(*m)) {
    if (const absl::string_view* code =
            std::get<pgwire::ErrorResponse>(*m).Find('C');
        code != nullptr) {
      status.SetPayload(kSqlStatePayload, absl::Cord(*code));
    }
  }
  return status;
}

}  // namespace

absl::StatusOr<UpstreamTarget> UpstreamTargetOf(
    const postgres::RouteOptions& options) {
  char* error = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(options.conninfo.c_str(), &error);
  if (parsed == nullptr) {
    std::string why = error != nullptr ? error : "out of memory";
    PQfreemem(error);
    return absl::InvalidArgumentError(
        absl::StrCat("route URI ", options.redacted_uri, ": ", why));
  }
  UpstreamTarget target;
  std::string sslmode;
  std::string hostaddr;
  for (PQconninfoOption* o = parsed; o->keyword != nullptr; ++o) {
    if (o->val == nullptr) continue;
    const absl::string_view key = o->keyword;
    if (key == "host") target.host = o->val;
    if (key == "hostaddr") hostaddr = o->val;
    if (key == "port" && *o->val != '\0') target.port = o->val;
    if (key == "user") target.user = o->val;
    if (key == "password") target.password = o->val;
    if (key == "dbname") target.database = o->val;
    if (key == "sslmode") sslmode = o->val;
  }
  PQconninfoFree(parsed);
  if (!hostaddr.empty()) target.host = hostaddr;
  auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("route URI ", options.redacted_uri,
                     " cannot serve the PostgreSQL port: ", why));
  };
  if (target.host.empty() || target.host[0] == '/' ||
      absl::StrContains(target.host, ',')) {
    return refuse(
        "it needs one TCP host (a socket directory or a host list is not "
        "served)");
  }
  if (target.user.empty()) return refuse("it names no user");
  if (sslmode == "require" || sslmode == "verify-ca" ||
      sslmode == "verify-full") {
    return refuse(
        "the port reaches PostgreSQL without TLS, and its sslmode requires "
        "TLS");
  }
  if (target.database.empty()) target.database = target.user;
  target.fence_schema = options.fence_schema;
  target.privileged_role = options.allow_privileged_role;
  // Pinned for the session's whole life (session_sql.h): RESET, RESET ALL
  // and DISCARD ALL return to these.
  target.parameters.emplace_back("client_encoding", "UTF8");
  target.parameters.emplace_back("standard_conforming_strings", "on");
  if (options.statement_timeout_ms > 0) {
    target.parameters.emplace_back("statement_timeout",
                                   absl::StrCat(options.statement_timeout_ms));
  }
  return target;
}

absl::StatusOr<std::optional<UpstreamTarget>> ReadTargetOf(
    const postgres::RouteOptions& options, const UpstreamTarget& write) {
  if (options.read_user.empty()) return std::nullopt;
  if (options.read_user == write.user) {
    return absl::InvalidArgumentError(absl::StrCat(
        "route URI ", options.redacted_uri, ": read_user \"", options.read_user,
        "\" is the route's own role; the read role must be one that cannot "
        "write (fencectl pg-setup --read_role)"));
  }
  UpstreamTarget read = write;
  read.user = options.read_user;
  read.password = options.read_password;
  read.read_role = true;
  read.privileged_role = false;
  read.write_user = write.user;
  return read;
}

std::string UpstreamSqlState(const absl::Status& status) {
  absl::optional<absl::Cord> code = status.GetPayload(kSqlStatePayload);
  return code.has_value() ? std::string(*code) : std::string();
}

bool Upstream::NoteParameter(const pgwire::Frame& frame) {
  absl::StatusOr<pgwire::BackendMessage> m = pgwire::ParseBackendMessage(frame);
  if (!m.ok() || !std::holds_alternative<pgwire::ParameterStatus>(*m)) {
    return false;
  }
  const auto& p = std::get<pgwire::ParameterStatus>(*m);
  parameters_[std::string(p.name)] = std::string(p.value);
  return true;
}

asio::awaitable<absl::StatusOr<std::unique_ptr<Upstream>>> Upstream::Connect(
    const UpstreamTarget& target, size_t max_message_bytes,
    MemoryBudget* memory) {
  auto executor = co_await asio::this_coro::executor;
  tcp::resolver resolver(executor);
  boost::system::error_code ec;
  tcp::resolver::results_type endpoints = co_await resolver.async_resolve(
      target.host, target.port, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    co_return absl::UnavailableError(absl::StrCat(
        "cannot resolve ", target.host, ":", target.port, ": ", ec.message()));
  }
  tcp::socket socket(executor);
  tcp::endpoint endpoint = co_await asio::async_connect(
      socket, endpoints, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    co_return absl::UnavailableError(absl::StrCat("cannot connect to ",
                                                  target.host, ":", target.port,
                                                  ": ", ec.message()));
  }
  socket.set_option(tcp::no_delay(true), ec);
  std::unique_ptr<Upstream> upstream(
      new Upstream(std::move(socket), max_message_bytes, memory));
  upstream->endpoint_ = endpoint;
  if (absl::Status s = co_await upstream->SignIn(target); !s.ok()) {
    co_return s;
  }
  if (absl::Status s = co_await upstream->CheckServer(target); !s.ok()) {
    co_return s;
  }
  co_return upstream;
}

asio::awaitable<absl::Status> Upstream::CheckServer(
    const UpstreamTarget& target) {
  // The parser reads UTF-8; a server in another encoding would convert
  // the client's bytes before its own parser reads them.
  auto encoding = parameters_.find("server_encoding");
  if (encoding == parameters_.end() || encoding->second != "UTF8") {
    co_return absl::FailedPreconditionError(absl::StrCat(
        "the route's database has server_encoding ",
        encoding == parameters_.end() ? std::string("(not reported)")
                                      : encoding->second,
        ": the port serves UTF8 databases only"));
  }
  absl::StatusOr<std::string> prepared =
      co_await Show("max_prepared_transactions");
  if (!prepared.ok()) co_return prepared.status();
  if (*prepared != "0") {
    co_return absl::FailedPreconditionError(absl::StrCat(
        "the route's server allows prepared transactions "
        "(max_prepared_transactions = ",
        *prepared,
        "): a prepared transaction outlives its session's fence; set it to "
        "0 to serve the route through the port"));
  }
  if (target.read_role) co_return co_await CheckReadRole(target);
  // What the fence a connection holds (postgres/fence_hold.h) rests on:
  // the role cannot release it, no connection escapes it, and the schema
  // has hold(). One round trip: the three answers joined by '|'.
  const std::string hold =
      absl::StrCat("'\"", target.fence_schema, "\".hold(text,bigint,text)'");
  std::optional<std::string> found;
  if (absl::Status s = co_await Run(
          absl::StrCat(
              "SELECT COALESCE((SELECT pg_catalog.string_agg(p.oid::pg_catalog."
              "regprocedure::text, ', ' ORDER BY 1) FROM pg_catalog.pg_proc p "
              "WHERE ",
              postgres::AdvisoryFunctionsCondition(),
              " AND pg_catalog.has_function_privilege(p.oid, 'EXECUTE')), '') "
              "|| '|' || COALESCE((SELECT pg_catalog.string_agg(extname, ', ' "
              "ORDER BY 1) FROM pg_catalog.pg_extension WHERE extname IN "
              "('dblink', 'postgres_fdw')), '') || '|' || "
              "COALESCE(pg_catalog.has_function_privilege(pg_catalog."
              "to_regprocedure(",
              hold, "), 'EXECUTE'), false)::text"),
          &found);
      !s.ok()) {
    co_return s;
  }
  std::vector<std::string> parts =
      absl::StrSplit(found.value_or(""), absl::MaxSplits('|', 2));
  if (parts.size() != 3) {
    co_return absl::UnavailableError(
        "the route's server check returned no row");
  }
  if (!parts[0].empty() && !target.privileged_role) {
    co_return absl::FailedPreconditionError(absl::StrCat(
        "the route's role may execute ", parts[0],
        ": the port holds each session's fence with an advisory lock that "
        "its client must not release; run `fencectl pg-setup "
        "--revoke_session_functions` on the route's database"));
  }
  if (!parts[1].empty()) {
    co_return absl::FailedPreconditionError(absl::StrCat(
        "the route's database has ", parts[1],
        " installed: a session could open connections of its own, which no "
        "fence holds; drop the extension to serve the route through the "
        "port"));
  }
  // version() came with hold(): asked only once hold() is there.
  std::optional<std::string> version;
  if (parts[2] == "true") {
    if (absl::Status s = co_await Run(
            absl::StrCat("SELECT \"", target.fence_schema, "\".version()"),
            &version);
        !s.ok()) {
      co_return s;
    }
  }
  int found_version = 0;
  if (!version.has_value() || !absl::SimpleAtoi(*version, &found_version) ||
      found_version < postgres::kMinFenceSchemaVersion) {
    co_return absl::FailedPreconditionError(absl::StrCat(
        "the route's fence schema \"", target.fence_schema, "\" is ",
        found_version == 0 ? std::string("older than the held fence")
                           : absl::StrCat("version ", found_version),
        ", or its hold() is not the route role's to execute; this gateway "
        "needs version ",
        postgres::kMinFenceSchemaVersion, " or later",
        ": run `fencectl pg-setup` on the route's database"));
  }
  co_return absl::OkStatus();
}

asio::awaitable<absl::Status> Upstream::CheckReadRole(
    const UpstreamTarget& target) {
  // One row: what the role may do that a read role must not, each part
  // named, joined by "; " (NULL parts left out); empty if nothing.
  std::vector<UpstreamStatement> check(1);
  check[0].sql = absl::StrCat(
      "SELECT pg_catalog.concat_ws('; ', "
      "(SELECT 'it is a superuser, or may create roles or databases, or "
      "bypass row security' FROM pg_catalog.pg_roles WHERE rolname = "
      "current_user AND (rolsuper OR rolcreaterole OR rolcreatedb OR "
      "rolbypassrls)), "
      "(SELECT 'it is a member of the route''s role ' || rolname FROM "
      "pg_catalog.pg_roles WHERE rolname = $1 AND "
      "pg_catalog.pg_has_role(current_user, oid, 'MEMBER')), "
      "(SELECT 'it may write ' || pg_catalog.string_agg(c.oid::pg_catalog."
      "regclass::text, ', ' ORDER BY 1) FROM pg_catalog.pg_class c JOIN "
      "pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind IN "
      "('r', 'p', 'v', 'm', 'f') AND n.nspname <> 'information_schema' AND "
      "n.nspname NOT LIKE 'pg\\_%' AND "
      "(pg_catalog.has_any_column_privilege(c.oid, 'INSERT, UPDATE') OR "
      "pg_catalog.has_table_privilege(c.oid, 'DELETE, TRUNCATE'))), "
      "(SELECT 'it may advance ' || pg_catalog.string_agg(c.oid::pg_catalog."
      "regclass::text, ', ' ORDER BY 1) FROM pg_catalog.pg_class c WHERE "
      "c.relkind = 'S' AND CASE WHEN c.relkind = 'S' THEN "
      "pg_catalog.has_sequence_privilege(c.oid, 'USAGE, UPDATE') END), "
      "(SELECT 'it may create objects in ' || pg_catalog.string_agg(nspname, "
      "', ' ORDER BY 1) FROM pg_catalog.pg_namespace WHERE nspname NOT LIKE "
      "'pg\\_%' AND pg_catalog.has_schema_privilege(oid, 'CREATE')), "
      "(SELECT 'it may execute ' || pg_catalog.string_agg(p.oid::pg_catalog."
      "regprocedure::text, ', ' ORDER BY 1) FROM pg_catalog.pg_proc p WHERE "
      "(",
      postgres::AdvisoryFunctionsCondition(),
      " OR p.proname IN ('pg_cancel_backend', 'pg_terminate_backend') OR "
      "p.pronamespace = pg_catalog.to_regnamespace($2)) AND "
      "pg_catalog.has_function_privilege(p.oid, 'EXECUTE')))");
  check[0].parameters = {target.write_user,
                         absl::StrCat("\"", target.fence_schema, "\"")};
  std::optional<std::string> found;
  if (absl::Status s = co_await RunExtended(check, &found); !s.ok()) {
    co_return s;
  }
  if (found.has_value() && !found->empty()) {
    co_return absl::FailedPreconditionError(absl::StrCat(
        "the route's read role \"", target.user,
        "\" is not read-only: ", *found,
        "; a session without a token runs as it, so it must not be able to "
        "write, signal backends, take advisory locks or call the fence "
        "functions: run `fencectl pg-setup --read_role ",
        target.user, " --revoke_session_functions` and take the rest from it"));
  }
  co_return absl::OkStatus();
}

asio::awaitable<absl::StatusOr<std::string>> Upstream::Show(
    const std::string& name) {
  const std::string sql = absl::StrCat("SHOW ", name);
  std::optional<std::string> value;
  if (absl::Status s = co_await Run(sql, &value); !s.ok()) co_return s;
  if (!value.has_value()) {
    co_return absl::UnavailableError(
        absl::StrCat("\"", sql, "\" returned no value"));
  }
  co_return *std::move(value);
}

asio::awaitable<absl::Status> Upstream::SignIn(const UpstreamTarget& target) {
  pgwire::StartupMessage startup;
  startup.parameters.emplace_back("user", target.user);
  startup.parameters.emplace_back("database", target.database);
  for (const auto& [name, value] : target.parameters) {
    startup.parameters.emplace_back(name, value);
  }
  if (absl::Status s =
          co_await WriteAll(socket_, pgwire::EncodeStartupPacket(startup));
      !s.ok()) {
    co_return s;
  }
  std::unique_ptr<ScramClient> scram;
  for (;;) {
    absl::StatusOr<pgwire::Frame> frame = co_await reader_.Next(socket_);
    if (!frame.ok()) {
      co_return absl::UnavailableError(
          absl::StrCat("the route's server closed while signing in: ",
                       frame.status().message()));
    }
    if (frame->type == 'E') co_return ServerError(*frame, "the sign-in");
    if (frame->type == 'S') {
      NoteParameter(*frame);
      continue;
    }
    if (frame->type == 'Z') co_return absl::OkStatus();
    absl::StatusOr<pgwire::BackendMessage> m =
        pgwire::ParseBackendMessage(*frame);
    if (!m.ok()) co_return absl::UnavailableError(m.status().message());
    if (const auto* key = std::get_if<pgwire::BackendKeyData>(&*m)) {
      process_id_ = key->process_id;
      secret_key_ = key->secret_key;
      continue;
    }
    const auto* auth = std::get_if<pgwire::Authentication>(&*m);
    if (auth == nullptr) continue;  // a notice, say
    std::string reply;
    switch (auth->code) {
      case 0:  // AuthenticationOk
        continue;
      case 3:  // cleartext password
        reply = PasswordMessage(
            absl::StrCat(target.password, std::string(1, '\0')));
        break;
      case 5:  // MD5, with a 4-byte salt
        reply = PasswordMessage(
            absl::StrCat("md5",
                         Md5Hex(absl::StrCat(
                             Md5Hex(absl::StrCat(target.password, target.user)),
                             auth->data)),
                         std::string(1, '\0')));
        break;
      case 10: {  // SASL: the mechanisms, each NUL-terminated
        std::vector<absl::string_view> mechanisms =
            absl::StrSplit(auth->data, '\0', absl::SkipEmpty());
        if (std::find(mechanisms.begin(), mechanisms.end(), "SCRAM-SHA-256") ==
            mechanisms.end()) {
          co_return absl::FailedPreconditionError(
              "the route's server offers no SASL mechanism the port speaks "
              "(SCRAM-SHA-256)");
        }
        scram = std::make_unique<ScramClient>(target.password, RandomNonce());
        const std::string first = scram->First();
        reply = pgwire::MessageBuilder('p')
                    .CString("SCRAM-SHA-256")
                    .Int32(static_cast<int32_t>(first.size()))
                    .Bytes(first)
                    .Finish();
        break;
      }
      case 11: {  // SASL continue: the server's first message
        if (scram == nullptr)
          co_return absl::UnavailableError("unexpected SASL message");
        absl::StatusOr<std::string> final = scram->Final(auth->data);
        if (!final.ok()) co_return final.status();
        reply = PasswordMessage(*final);
        break;
      }
      case 12:  // SASL final: the server's signature
        if (scram == nullptr)
          co_return absl::UnavailableError("unexpected SASL message");
        if (absl::Status s = scram->Verify(auth->data); !s.ok()) co_return s;
        continue;
      default:
        co_return absl::FailedPreconditionError(absl::StrCat(
            "the route's server asks for an authentication method the port "
            "does not speak (code ",
            auth->code, "); use trust, password, md5 or scram-sha-256"));
    }
    if (absl::Status s = co_await WriteAll(socket_, reply); !s.ok()) {
      co_return s;
    }
  }
}

asio::awaitable<absl::Status> Upstream::Run(
    const std::string& sql, std::optional<std::string>* first_value) {
  co_return co_await Exchange(
      pgwire::Encode(pgwire::FrontendMessage(pgwire::Query{sql})),
      absl::StrCat("\"", sql, "\""), first_value);
}

asio::awaitable<absl::Status> Upstream::RunExtended(
    const std::vector<UpstreamStatement>& statements,
    std::optional<std::string>* first_value) {
  std::string bytes;
  for (const UpstreamStatement& statement : statements) {
    absl::StrAppend(&bytes,
                    pgwire::Encode(pgwire::Parse{"", statement.sql, {}}));
    pgwire::Bind bind;
    for (const std::optional<std::string>& p : statement.parameters) {
      bind.parameters.push_back(
          p.has_value() ? std::optional<absl::string_view>(*p) : std::nullopt);
    }
    absl::StrAppend(&bytes, pgwire::Encode(bind),
                    pgwire::Encode(pgwire::Execute{"", 0}));
  }
  absl::StrAppend(&bytes, pgwire::Encode(pgwire::Sync{}));
  // Built before the co_await: GCC 12 destroys a temporary of a
  // conditional inside a co_await expression twice.
  std::string what;
  for (const UpstreamStatement& statement : statements) {
    absl::StrAppend(&what, what.empty() ? "\"" : "; ", statement.sql);
  }
  absl::StrAppend(&what, "\"");
  co_return co_await Exchange(bytes, what, first_value);
}

asio::awaitable<absl::Status> Upstream::Exchange(
    const std::string& bytes, const std::string& what,
    std::optional<std::string>* first_value) {
  if (absl::Status s = co_await WriteAll(socket_, bytes); !s.ok()) {
    co_return s;
  }
  absl::Status result = absl::OkStatus();
  for (;;) {
    absl::StatusOr<pgwire::Frame> frame = co_await reader_.Next(socket_);
    if (!frame.ok()) co_return frame.status();
    if (frame->type == 'S') NoteParameter(*frame);
    if (frame->type == 'E' && result.ok()) {
      result = ServerError(*frame, what);
    }
    if (frame->type == 'D' && first_value != nullptr &&
        !first_value->has_value()) {
      absl::StatusOr<pgwire::BackendMessage> m =
          pgwire::ParseBackendMessage(*frame);
      const auto* row = m.ok() ? std::get_if<pgwire::DataRow>(&*m) : nullptr;
      if (row != nullptr && !row->values.empty() &&
          row->values[0].has_value()) {
        *first_value = std::string(*row->values[0]);
      }
    }
    if (frame->type == 'Z') co_return result;
  }
}

asio::awaitable<void> CancelUpstream(tcp::endpoint endpoint, int32_t process_id,
                                     int32_t secret_key) {
  tcp::socket socket(co_await asio::this_coro::executor);
  boost::system::error_code ec;
  co_await socket.async_connect(endpoint,
                                asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return;
  (void)co_await WriteAll(socket,
                          pgwire::EncodeStartupPacket(
                              pgwire::CancelRequest{process_id, secret_key}));
  // The server closes the connection once it has read the request.
  char byte;
  co_await socket.async_read_some(
      asio::buffer(&byte, 1), asio::redirect_error(asio::use_awaitable, ec));
}

std::unique_ptr<Upstream> UpstreamPool::Take() {
  if (idle_.empty()) return nullptr;
  std::unique_ptr<Upstream> upstream = std::move(idle_.back());
  idle_.pop_back();
  return upstream;
}

void UpstreamPool::Give(std::unique_ptr<Upstream> upstream) {
  if (idle_.size() < max_idle_) idle_.push_back(std::move(upstream));
}

}  // namespace fencegate::pgport
