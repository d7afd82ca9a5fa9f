// Copyright fencegate authors.
//
// PgConnectionPool: a bounded number of connections, opened lazily and
// reopened after they break (or after the server closed them while idle), so
// the adapter recovers by itself when PostgreSQL restarts.

#ifndef STORAGE_ADAPTERS_POSTGRES_CONNECTION_POOL_H_
#define STORAGE_ADAPTERS_POSTGRES_CONNECTION_POOL_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "storage_adapters/postgres/pg_connection.h"

namespace fencegate {

// Thread safety: safe for concurrent use. A Lease is used by one thread.
class PgConnectionPool {
 public:
  // Runs on every new connection (checks its role and the fence function).
  // An error fails the Acquire() with that status and closes the
  // connection; a libpqxx exception fails it with UNAVAILABLE.
  using Setup = std::function<absl::Status(PgConnection&)>;

  // `redacted` names the server in error messages without its password.
  // At most `size` connections are open; of those given back, at most
  // `keep_idle` (all, if negative) stay open for the next Acquire().
  PgConnectionPool(std::string conninfo, std::string redacted, int size,
                   absl::Duration wait, Setup setup, int keep_idle = -1);
  PgConnectionPool(const PgConnectionPool&) = delete;
  PgConnectionPool& operator=(const PgConnectionPool&) = delete;
  ~PgConnectionPool();

  // Exclusive use of one connection until destroyed.
  class Lease {
   public:
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&&) = delete;
    ~Lease();
    PgConnection& conn() { return *conn_; }
    // The connection is broken (or its state unknown): close it instead of
    // returning it to the pool.
    void Discard() { discard_ = true; }

   private:
    friend class PgConnectionPool;
    Lease(PgConnectionPool* pool, std::unique_ptr<PgConnection> conn);
    PgConnectionPool* pool_;
    std::unique_ptr<PgConnection> conn_;
    bool discard_ = false;
  };

  // A connection, opening one if needed. UNAVAILABLE if PostgreSQL cannot be
  // reached or no connection frees up within the wait; Setup's error if it
  // refused a new connection.
  absl::StatusOr<Lease> Acquire();

  // Connections open now: idle in the pool, and leased out.
  struct ConnectionCounts {
    size_t idle = 0;
    size_t busy = 0;
  };
  ConnectionCounts Counts() const;

 private:
  void Release(std::unique_ptr<PgConnection> conn, bool discard);

  const std::string conninfo_;
  const std::string redacted_;
  const int size_;
  const int keep_idle_;
  const absl::Duration wait_;
  const Setup setup_;
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<PgConnection>> idle_ ABSL_GUARDED_BY(mu_);
  int in_use_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace fencegate

#endif  // STORAGE_ADAPTERS_POSTGRES_CONNECTION_POOL_H_
