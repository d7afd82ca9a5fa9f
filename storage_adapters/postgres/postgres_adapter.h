// Copyright fencegate authors.
//
// PostgresAdapter: applies SqlStatement operations to PostgreSQL, fenced
// inside the database as well.
//
// Every Write runs in one transaction:
//   1. the domain's row of the fence table is inserted, or raised, only if
//      its stored token is <= the request's token (an upsert that takes the
//      row lock, so concurrent transactions of the domain serialize);
//      if the database already holds a higher token -- from another gateway
//      or a direct writer following the same protocol -- the transaction
//      rolls back and the write fails as stale (FAILED_PRECONDITION with a
//      StaleToken detail), exactly like a stale write refused by the gateway;
//   2. the statements run in order, each with its parameters;
//   3. commit. Any failure rolls back everything, the fence row included.
// So the database is authoritative for its own data: gateways that do not
// share a fence store still never apply a stale write.
//
// Errors: SQL errors carry the SQLSTATE in the message and a SqlError
// detail; integrity violations (class 23) are FAILED_PRECONDITION, a
// statement timeout DEADLINE_EXCEEDED, serialization failures and deadlocks
// ABORTED, other SQL errors INVALID_ARGUMENT. An unreachable server is
// UNAVAILABLE; a connection lost during COMMIT is UNAVAILABLE with "outcome
// unknown". A connection that breaks before COMMIT is retried once on a
// fresh connection, which is safe: nothing was committed.
//
// Tokens above 2^63-1 (PostgreSQL's bigint) are refused by Validate with
// INVALID_ARGUMENT, before any fence moves.

#ifndef STORAGE_ADAPTERS_POSTGRES_POSTGRES_ADAPTER_H_
#define STORAGE_ADAPTERS_POSTGRES_POSTGRES_ADAPTER_H_

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

  const PostgresAdapterOptions options_;
  const std::string fence_upsert_sql_;
  const std::string fence_select_sql_;
  PgConnectionPool pool_;
};

// The fence table's DDL for `table` (docs/postgres.md shows it).
std::string FenceTableDdl(const std::string& table);

}  // namespace fencegate

#endif  // STORAGE_ADAPTERS_POSTGRES_POSTGRES_ADAPTER_H_
