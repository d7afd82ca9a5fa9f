// Copyright fencegate authors.
//
// PostgresTokenSource: locks from a lease table in PostgreSQL, with tokens
// from a sequence. One row per held lock: name, owner (a holder id unique
// to the acquisition), token and expires_at. Each step is one statement,
// judged by the database's own clock (now()):
//   acquire  INSERT a row with nextval() as its token, or take over an
//            expired row (ON CONFLICT ... DO UPDATE ... WHERE expired);
//   renew    UPDATE expires_at where the row is still ours and not expired;
//   release  DELETE the row where it is still ours.
// A sequence never goes back, not even when a transaction aborts or a
// session dies, so no token is handed out twice. After acquiring, the
// source raises the gateway's fence to the token (Fence) before Acquire
// returns, so that a paused previous holder is shut out at once.
//
// Neither `SELECT ... FOR UPDATE` nor an advisory lock would do: neither
// has a token, and a paused holder keeps either for as long as its session
// lives (docs/token-sources.md).

#ifndef CLIENT_POSTGRES_POSTGRES_TOKEN_SOURCE_H_
#define CLIENT_POSTGRES_POSTGRES_TOKEN_SOURCE_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fencegate/client/token_source.h"
#include "grpcpp/channel.h"

namespace fencegate::client {

struct PostgresTokenSourceOptions {
  // libpq connection string or URI of the database holding the locks.
  std::string dsn;
  // The lease table and the token sequence, created on first use if
  // missing (the role then needs CREATE on the schema). Default:
  // "fencegate_locks" and "fencegate_lock_tokens", unqualified (the role's
  // search_path decides the schema).
  std::string table = "fencegate_locks";
  std::string sequence = "fencegate_lock_tokens";
  // The gateway whose fence is raised on every acquisition. Required.
  std::shared_ptr<grpc::Channel> gateway;
};

class PostgresTokenSource final : public TokenSource {
 public:
  // INVALID_ARGUMENT for a DSN libpq cannot parse, a table or sequence name
  // that is not a plain identifier ([a-z_][a-z0-9_]*, at most 63 bytes) or
  // no gateway. Does not connect.
  static absl::StatusOr<std::unique_ptr<PostgresTokenSource>> Create(
      PostgresTokenSourceOptions options);
  ~PostgresTokenSource() override;

  // See TokenSource::Acquire. Polls every 50 ms while the lock is held and
  // not expired, up to options.wait: DEADLINE_EXCEEDED naming the holder.
  // UNAVAILABLE if PostgreSQL or the gateway cannot be reached. Renewals run
  // every ttl/3 on a connection of the lock's own, whose statements and
  // row-lock waits give up after ttl/3; one that finds the row gone,
  // someone else's or expired calls `on_lost`.
  absl::StatusOr<std::unique_ptr<HeldLock>> Acquire(
      const std::string& name, const LockOptions& options,
      std::function<void()> on_lost) override;

 private:
  explicit PostgresTokenSource(PostgresTokenSourceOptions options);
  const PostgresTokenSourceOptions options_;
};

}  // namespace fencegate::client

#endif  // CLIENT_POSTGRES_POSTGRES_TOKEN_SOURCE_H_
