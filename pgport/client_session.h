// Copyright fencegate authors.
//
// ClientSession: one client of the PostgreSQL port, from its startup packet
// to its last message (pgport/include/pgport/pg_port.h says what it does).
// Two coroutines run it on the port's thread: one reads the client and
// sends upstream (with the port's own messages added: failing messages in
// place of refused ones, the reset at the end), the other reads the
// server's replies and passes them through the ResponseQueue to the client.
// A session with a token is fenced by its server connection, which holds
// the domain's fence for the whole session (postgres/fence_hold.h) from
// before the client's first message; a raise that waits for it makes the
// session give the domain up between two transactions, which ends it.
//
// Thread safety: all on the port's I/O thread, but Cancel() (posted there).

#ifndef PGPORT_CLIENT_SESSION_H_
#define PGPORT_CLIENT_SESSION_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "fencegate/common/memory_budget.h"
#include "pgport/asio.h"
#include "pgport/client_stream.h"
#include "pgport/frame_reader.h"
#include "pgport/port_state.h"
#include "pgport/response_queue.h"
#include "pgport/transaction_tracker.h"
#include "pgport/upstream.h"
#include "pgwire/frontend.h"
#include "postgres/session_sql.h"

namespace fencegate::pgport {

// SET fencegate.<name> = value (or -c fencegate.<name>=value at startup):
// the domain or token it sets, checked. INVALID_ARGUMENT for an unknown
// name, a bad domain, or a token that is not a number from 1 to 2^63-1
// (PostgreSQL's bigint fence column).
absl::Status ParseGatewaySetting(absl::string_view name,
                                 absl::string_view value, std::string* domain,
                                 uint64_t* token);

// FAILED_PRECONDITION, saying why, if the server reported a pinned setting
// (postgres/include/postgres/session_sql.h) changed on `upstream`.
absl::Status CheckPinnedSettings(const Upstream& upstream);

// The highest token of a stale-token error, as text; empty for another.
std::string StaleDetail(const absl::Status& status);

// The SQLSTATE that tells a client why this gateway refused it: FG001 for
// a stale token, FG006 for one the domain's token rules refuse, 28000,
// 42501 and 22023 for the identity, the policy and bad input; `otherwise`
// for any other status.
absl::string_view RefusalSqlState(const absl::Status& status,
                                  absl::string_view otherwise = "58000");

class ClientSession : public std::enable_shared_from_this<ClientSession> {
 public:
  ClientSession(PortState& port, tcp::socket client, int32_t process_id,
                int32_t secret_key);

  // The whole session; returns when it has ended.
  asio::awaitable<void> Run();

  // A CancelRequest with this session's key: cancels what its server runs.
  void Cancel();
  // Ends the session at once; the server rolls back what it held.
  void Close();
  int32_t secret_key() const { return secret_key_; }
  // It has signed in and reached its route's server.
  bool signed_in() const { return signed_in_; }
  // Its route (null until it has one), and the domain whose fence its
  // server connection holds (empty if none).
  const PortRoute* route() const { return route_; }
  const std::string& held_domain() const;
  // A raise waits for the domain this session holds (RaiseWatch): the
  // session gives it up as soon as it is between two transactions, with
  // nothing owed by the server, and ends, saying why.
  void OnRaiseWaiting();

 private:
  using Statement = postgres::SessionStatement;

  // Runs `loop` of `self`, holding it for as long as the loop runs.
  static asio::awaitable<void> Keep(
      std::shared_ptr<ClientSession> self,
      asio::awaitable<void> (ClientSession::*loop)());

  // --- client_session.cc: start and end.
  // The startup packet, sign-in, route and upstream connection; false if
  // the session ended (the client was told why).
  asio::awaitable<bool> Start();
  // SSLRequest: TLS if the port serves it ('S', the handshake, the client
  // certificate's checks), else 'N'. False if the session ended.
  asio::awaitable<bool> OnSslRequest();
  // With a CRL directory: the client certificate is not revoked (off the
  // port's thread).
  asio::awaitable<absl::Status> CheckRevocation();
  // Signed in by the client certificate (identity_), or with SCRAM-SHA-256
  // against the user file, or admitted without either (no user file).
  asio::awaitable<absl::Status> Authenticate();
  // Under a policy: may this session work in its domain on its route?
  // PERMISSION_DENIED or UNAUTHENTICATED if not; OK without a policy.
  absl::Status AdmitSession() const;
  // The SET statements that give the upstream session the client's
  // startup parameters (and read-only mode without a token).
  std::string SetupSql() const;
  // session_watchdog.cc: ends a session idle inside a transaction past the
  // idle limit, and cancels a statement that runs past the route's
  // statement_timeout_ms and a second (neither side heard from), whatever
  // the session set.
  asio::awaitable<void> Watchdog();
  // Sends a FATAL error and closes.
  asio::awaitable<void> Fatal(absl::string_view sqlstate,
                              absl::string_view message);
  // Appends to what the client is sent, and writes it unless another
  // write is under way (which then writes it).
  asio::awaitable<void> ToClient(std::string bytes);

  // --- session_hold.cc: the fence the server connection holds.
  // Runs the port's own statements on the session's connection (one
  // extended-protocol batch) and gives the first value of their first row;
  // a server error as FAILED_PRECONDITION with its SQLSTATE
  // (UpstreamSqlState).
  using OwnRunner = std::function<asio::awaitable<absl::Status>(
      const std::vector<UpstreamStatement>&, std::optional<std::string>*)>;
  // Arms the connection with secret_ (if `run` is the first to use it)
  // and, with a token, makes it hold the domain's fence at the token:
  // checked here first (CheckLocally), the database's fence raised to it by
  // hold() if lower. A stale token is FAILED_PRECONDITION with a
  // StaleTokenError payload (the gateway learns the database's fence); a
  // server error names the route's refusal.
  asio::awaitable<absl::Status> Hold(const OwnRunner& run);
  // hold()'s answer `value` for domain_ at token_: sets holding_ if it is
  // the token; stale (learnt) if above.
  absl::Status Held(const std::optional<std::string>& value);
  // OwnRunner on a running session: the batch goes through the
  // ResponseQueue, its answer kept from the client, once the server owes
  // nothing else.
  asio::awaitable<absl::Status> RunOwn(
      const std::vector<UpstreamStatement>& statements,
      std::optional<std::string>* value);
  // Sends what is queued upstream and waits until the server owes nothing;
  // false if the session ended.
  asio::awaitable<bool> Drain();
  // SET fencegate.* of another domain or token, in a running session
  // between two transactions: admitted and checked here first (a refusal
  // leaves the old hold as it was), then the old hold released and the
  // new one taken (raising the database's fence if lower). OK, or the
  // refusal; after a refusal by the database the session holds nothing
  // and must end.
  asio::awaitable<absl::Status> ChangeFence(std::string domain, uint64_t token);
  // Gives the held domain up and ends the session if a raise waits and the
  // server is between two transactions with nothing owed.
  void MaybeGiveUp();

  // --- session_relay.cc: the messages of a running session.
  asio::awaitable<void> ClientLoop();
  // One client message; false ends the session.
  asio::awaitable<bool> OnMessage(const pgwire::FrontendMessage& message);
  // What `sql` does (session_sql.h): up to kInlineClassifyBytes through
  // the port's cache, on this thread; longer text on the long-text
  // parser's thread (sql_parse.h), so that its parse holds up no other
  // session.
  asio::awaitable<absl::StatusOr<std::vector<Statement>>> Classify(
      absl::string_view sql);
  static constexpr size_t kInlineClassifyBytes = 16384;
  asio::awaitable<void> OnQuery(absl::string_view sql);
  asio::awaitable<void> OnParse(const pgwire::Parse& parse);
  asio::awaitable<void> OnBind(const pgwire::Bind& bind);
  asio::awaitable<void> OnExecute(const pgwire::Execute& execute);
  // A Query of fencegate.* settings only, answered here; a change of the
  // domain or token moves the connection's hold (ChangeFence).
  asio::awaitable<void> AnswerSettings(
      const std::vector<Statement>& statements);
  // Checks the token against this gateway's fence (rules 1-3 and 11) at
  // each transaction's start, before the database's hold: OK, or the error
  // to answer (FG001 for a stale token).
  // With a gate, the transaction is admitted under the policy first
  // (42501 if denied) and its advance audited.
  asio::awaitable<absl::Status> CheckLocally();
  // A refused Query: answered here when no transaction is open, else made
  // to fail upstream so that the server's transaction fails as the client
  // expects.
  void RefuseQuery(absl::string_view sqlstate, absl::string_view message,
                   absl::string_view detail = {});
  // A refused extended-protocol message: a failing Bind in its place, and
  // the rest of the batch skipped up to Sync.
  void RefuseExtended(absl::string_view sqlstate, absl::string_view message,
                      absl::string_view detail = {});

  // --- session_upstream.cc: the session's traffic with its server.
  asio::awaitable<void> ReplyLoop();
  // The database refused the session's token as stale: this gateway's
  // fence is raised to what the database holds, read by the gateway.
  void LearnFromDatabase();
  // Sends what was queued for the server.
  asio::awaitable<bool> FlushUpstream();
  // Before the client's next message is read: while the client has more
  // than kMaxPendingClientBytes to read, or the server owes more than
  // kMaxOwed replies, sends what is queued upstream and waits, so that a
  // client that does not read cannot make the session hold more (replies
  // the port answers itself included). False if the session ended.
  asio::awaitable<bool> WaitForRoom();
  // Reserves what the client has yet to read in the memory budget once it
  // passes FrameReader::kUnreservedBytes; false if it does not fit.
  bool ReservePending();
  void Send(const pgwire::FrontendMessage& message, Expected expected);
  // Sends the client's message being handled (current_) as it came.
  void Forward(Expected expected);
  // After the client's last message: reset and pool the connection if the
  // session ended cleanly, else close it.
  void EndUpstream();

  PortState& port_;
  ClientStream client_;
  FrameReader client_reader_;
  const int32_t process_id_;
  const int32_t secret_key_;
  PortRoute* route_ = nullptr;
  // What the policy sees as the session's resource: "<route>/".
  std::string resource_;
  std::unique_ptr<Upstream> upstream_;
  bool closed_ = false;
  bool signed_in_ = false;
  // The client's Terminate (or end) came; the reply loop ends the upstream.
  bool ending_ = false;
  bool reset_failed_ = false;

  // Startup parameters the upstream session is given with SET.
  std::vector<std::pair<std::string, std::string>> settings_;
  std::string user_;
  // The client certificate's identity; empty without one.
  std::string identity_;
  std::string domain_;
  uint64_t token_ = 0;
  // The session began without a token: its server connection is the read
  // role's (UpstreamTarget::read_role), and it never takes one.
  bool read_role_ = false;
  // The secret that arms the server connection for this session
  // (fence_hold.h), and whether it holds domain_'s fence at token_.
  std::string secret_;
  bool holding_ = false;
  // A raise waits for the held domain; the session is giving it up.
  bool raise_waiting_ = false;
  bool giving_up_ = false;

  TransactionTracker tracker_;
  ResponseQueue queue_;
  std::string upstream_out_;
  // The client's message being handled, as it came.
  absl::string_view current_;
  std::string client_out_;
  bool writing_client_ = false;
  // Bytes of the write to the client under way.
  size_t writing_bytes_ = 0;
  // What the client has yet to read, past FrameReader::kUnreservedBytes,
  // reserved in the gateway's memory budget until it is written.
  MemoryBudget::Reservation pending_reservation_;
  size_t pending_reserved_ = 0;
  // The reply loop waits while the client has more than this to read, and
  // the client loop reads no more of the client's messages while it has,
  // or while the server owes more than kMaxOwed replies.
  static constexpr size_t kMaxPendingClientBytes = 1 << 20;
  static constexpr size_t kMaxOwed = 4096;
  // Wakes the reply loop once a write to the client is done.
  asio::steady_timer client_drained_;
  // Wakes the client loop (WaitForRoom) once a write to the client is done
  // or replies came: a timer of its own, since re-arming one cancels its
  // other waiter.
  asio::steady_timer room_;
  // Extended protocol: what each prepared statement and portal does.
  absl::flat_hash_map<std::string, Statement> statements_;
  absl::flat_hash_map<std::string, Statement> portals_;
  // A message of this batch was refused: skip to Sync.
  bool skipping_ = false;
  std::chrono::steady_clock::time_point last_client_message_;
  std::chrono::steady_clock::time_point last_server_message_;
  // The watchdog cancelled the running statement; no reply since.
  bool statement_cancelled_ = false;
};

}  // namespace fencegate::pgport

#endif  // PGPORT_CLIENT_SESSION_H_
