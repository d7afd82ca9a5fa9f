// Copyright fencegate authors.
//
// PostgresAdapter: applies SqlStatement operations to PostgreSQL, fenced
// inside the database as well.
//
// Every Write is one transaction, sent in one round trip (libpq's pipeline
// mode: the queries and a sync go out together, and the server runs them as
// one implicit transaction that commits at the sync):
//   1. the domain's row of the fence table is inserted, or raised, if its
//      stored token is <= the request's token (an upsert that takes the row
//      lock, so concurrent transactions of the domain serialize); if the
//      database already holds a higher token -- from another gateway or a
//      direct writer following the same protocol -- the upsert fails on
//      purpose, the server skips every statement after it, and the write
//      fails as stale (FAILED_PRECONDITION with a StaleToken detail), exactly
//      like a stale write refused by the gateway;
//   2. the statements run in order, each with its parameters;
//   3. the sync commits. Any failure rolls back everything, the fence row
//      included.
// So the database is authoritative for its own data: gateways that do not
// share a fence store still never apply a stale write.
//
// Statements must not control the transaction: BEGIN, COMMIT, ROLLBACK,
// SAVEPOINT and the like are refused by Validate (INVALID_ARGUMENT), and a
// statement that still leaves a transaction open is rolled back and refused.
// COPY is refused by Validate too.
//
// Errors: SQL errors carry the SQLSTATE in the message and a SqlError
// detail; integrity violations (class 23) are FAILED_PRECONDITION, a
// statement timeout DEADLINE_EXCEEDED, serialization failures and deadlocks
// ABORTED, other SQL errors INVALID_ARGUMENT. An unreachable server is
// UNAVAILABLE; a connection lost after the write was sent, with no error
// before it, is UNAVAILABLE with "outcome unknown". A write that never fully
// reached the server, or that the server aborted while ending the session
// (e.g. on shutdown), is retried once on a fresh connection, which is safe:
// nothing was committed. Pooled connections that the server closed while
// idle are replaced before use.
//
// Tokens above 2^63-1 (PostgreSQL's bigint) are refused by Validate with
// INVALID_ARGUMENT, before any fence moves.

#ifndef STORAGE_ADAPTERS_POSTGRES_POSTGRES_ADAPTER_H_
#define STORAGE_ADAPTERS_POSTGRES_POSTGRES_ADAPTER_H_

#include <libpq-fe.h>

#include <memory>
#include <string>

#include "storage_adapters/postgres/config.h"
#include "storage_adapters/postgres/connection_pool.h"
#include "storage_adapters/storage_adapter.h"

namespace fencegate {

class PostgresAdapter final : public StorageAdapter {
 public:
  explicit PostgresAdapter(PostgresAdapterOptions options);
  ~PostgresAdapter() override;

  absl::Status Validate(const WriteTarget& target,
                        const Operations& ops) const override;
  absl::Status Apply(const WriteTarget& target, const Operations& ops,
                     OpResults* results) override;

 private:
  // One attempt; sets *retryable when the connection broke before COMMIT.
  absl::Status ApplyOnce(const WriteTarget& target, const Operations& ops,
                         OpResults* results, bool* retryable);
  // The stale-token error for `target`, with the database's highest token.
  absl::Status StaleError(PGconn* c, const WriteTarget& target);

  const PostgresAdapterOptions options_;
  const std::string fence_upsert_sql_;
  const std::string fence_select_sql_;
  PgConnectionPool pool_;
};

// The fence table's DDL for `table` (docs/postgres.md shows it).
std::string FenceTableDdl(const std::string& table);

// The upsert that opens every Write's transaction: $1 domain, $2 token.
// Raises or keeps the domain's row, and fails with SQLSTATE 22012 (division
// by zero, on purpose) if the row holds a higher token.
std::string FenceUpsertSql(const std::string& table);

}  // namespace fencegate

#endif  // STORAGE_ADAPTERS_POSTGRES_POSTGRES_ADAPTER_H_
