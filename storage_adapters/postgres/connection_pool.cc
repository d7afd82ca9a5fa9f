// Copyright fencegate authors.

#include "storage_adapters/postgres/connection_pool.h"

#include "absl/strings/str_cat.h"

namespace fencegate {

PgConnectionPool::PgConnectionPool(std::string conninfo, std::string redacted,
                                   int size, absl::Duration wait, Setup setup,
                                   int keep_idle)
    : conninfo_(std::move(conninfo)),
      redacted_(std::move(redacted)),
      size_(size),
      keep_idle_(keep_idle < 0 ? size : keep_idle),
      wait_(wait),
      setup_(std::move(setup)) {}

PgConnectionPool::~PgConnectionPool() = default;

PgConnectionPool::Lease::Lease(PgConnectionPool* pool,
                               std::unique_ptr<PgConnection> conn)
    : pool_(pool), conn_(std::move(conn)) {}

PgConnectionPool::Lease::Lease(Lease&& other) noexcept
    : pool_(other.pool_),
      conn_(std::move(other.conn_)),
      discard_(other.discard_) {
  other.pool_ = nullptr;
}

PgConnectionPool::Lease::~Lease() {
  if (pool_ != nullptr) pool_->Release(std::move(conn_), discard_);
}

absl::StatusOr<PgConnectionPool::Lease> PgConnectionPool::Acquire() {
  std::unique_ptr<PgConnection> conn;
  {
    absl::MutexLock lock(&mu_);
    auto available = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return in_use_ < size_;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&available), wait_)) {
      return absl::UnavailableError(
          absl::StrCat("postgres ", redacted_, ": all ", size_,
                       " connections busy for ", absl::FormatDuration(wait_)));
    }
    ++in_use_;
    if (!idle_.empty()) {
      conn = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  if (conn != nullptr && conn->IdleAndAlive()) {
    return Lease(this, std::move(conn));
  }
  conn.reset();  // Closed by the server while idle: open a fresh one.
  // Open a new connection outside the lock: it can take connect_timeout.
  absl::StatusOr<std::unique_ptr<PgConnection>> opened =
      PgConnection::Open(conninfo_);
  if (!opened.ok()) {
    Release(nullptr, true);
    return absl::UnavailableError(
        absl::StrCat("postgres ", redacted_, ": ", opened.status().message()));
  }
  conn = *std::move(opened);
  absl::Status set_up = setup_ ? setup_(*conn) : absl::OkStatus();
  if (!set_up.ok()) {
    conn.reset();
    Release(nullptr, true);
    return set_up;
  }
  return Lease(this, std::move(conn));
}

void PgConnectionPool::Release(std::unique_ptr<PgConnection> conn,
                               bool discard) {
  std::unique_ptr<PgConnection> closed;  // Closed after the lock's release.
  absl::MutexLock lock(&mu_);
  --in_use_;
  if (conn == nullptr || discard) return;
  if (static_cast<int>(idle_.size()) >= keep_idle_) {
    closed = std::move(conn);
    return;
  }
  idle_.push_back(std::move(conn));
}

PgConnectionPool::ConnectionCounts PgConnectionPool::Counts() const {
  absl::MutexLock lock(&mu_);
  return {idle_.size(), static_cast<size_t>(in_use_)};
}

}  // namespace fencegate
