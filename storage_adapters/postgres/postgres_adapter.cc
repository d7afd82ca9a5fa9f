// Copyright fencegate authors.

#include "storage_adapters/postgres/postgres_adapter.h"

#include <pthread.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <optional>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "fencegate/common/sync_point.h"
#include "storage_adapters/postgres/fence_schema.h"
#include "storage_adapters/postgres/role_check.h"
#include "storage_adapters/postgres/sql_text.h"

namespace fencegate {
namespace {

// How often the expirer looks at an empty queue: a write that a sender
// took at once needs nothing of it, and one that waits calls it.
constexpr absl::Duration kIdleLook = absl::Milliseconds(100);

}  // namespace

PostgresAdapter::PostgresAdapter(PostgresAdapterOptions options,
                                 const AdapterContext& context)
    : options_(std::move(options)),
      fence_call_sql_(postgres::FenceCallSql(options_.fence_schema)),
      on_warning_(context.on_warning),
      classifier_(postgres::StatementClassifier::Options{}),
      spread_after_(std::clamp(absl::Milliseconds(options_.spread_after_ms),
                               absl::ZeroDuration(),
                               absl::Milliseconds(options_.pool_wait_ms) / 2)),
      pool_(options_.conninfo, options_.redacted_uri, options_.pool_size,
            absl::Milliseconds(options_.pool_wait_ms),
            [this](PgConnection& c) { return SetUpConnection(c); }),
      control_pool_(options_.conninfo, options_.redacted_uri, 2,
                    absl::Milliseconds(options_.pool_wait_ms),
                    [this](PgConnection& c) { return SetUpConnection(c); }),
      watchdog_(options_.statement_timeout_ms == 0
                    ? absl::InfiniteDuration()
                    : absl::Milliseconds(options_.statement_timeout_ms) +
                          absl::Seconds(1)),
      expirer_([this] { ExpireQueued(); }) {
  if (context.metrics.enabled()) {
    queue_wait_ = &prometheus::BuildHistogram()
                       .Name("fencegate_postgres_queue_wait_seconds")
                       .Help("Time a write waited for a PostgreSQL sender")
                       .Register(*context.metrics.registry)
                       .Add({{"route", context.route}}, LatencyBuckets());
    constexpr char kHelp[] = "PostgreSQL connections of a route, by state";
    idle_gauge_ = context.metrics.scrape_gauges->Add(
        "fencegate_postgres_connections", kHelp,
        {{"route", context.route}, {"state", "idle"}},
        [this] { return static_cast<double>(pool_.Counts().idle); });
    busy_gauge_ = context.metrics.scrape_gauges->Add(
        "fencegate_postgres_connections", kHelp,
        {{"route", context.route}, {"state", "busy"}},
        [this] { return static_cast<double>(pool_.Counts().busy); });
  }
  if (context.metrics.enabled()) {
    escapes_ = &prometheus::BuildCounter()
                    .Name("fencegate_postgres_session_escapes_total")
                    .Help(
                        "Batches after which a PostgreSQL session's "
                        "reported parameters differed from its baseline "
                        "(the connection was closed)")
                    .Register(*context.metrics.registry)
                    .Add({{"route", context.route}});
    auto& lookups = prometheus::BuildCounter()
                        .Name("fencegate_postgres_classifier_lookups_total")
                        .Help(
                            "SQL texts classified, by whether the verdict "
                            "was cached")
                        .Register(*context.metrics.registry);
    classifier_hits_ =
        &lookups.Add({{"route", context.route}, {"result", "hit"}});
    classifier_misses_ =
        &lookups.Add({{"route", context.route}, {"result", "miss"}});
    constexpr char kCacheHelp[] = "The SQL classifier's cache, by size";
    cache_entries_gauge_ = context.metrics.scrape_gauges->Add(
        "fencegate_postgres_classifier_cache", kCacheHelp,
        {{"route", context.route}, {"size", "entries"}},
        [this] { return static_cast<double>(classifier_.counts().entries); });
    cache_bytes_gauge_ = context.metrics.scrape_gauges->Add(
        "fencegate_postgres_classifier_cache", kCacheHelp,
        {{"route", context.route}, {"size", "bytes"}},
        [this] { return static_cast<double>(classifier_.counts().bytes); });
  }
  absl::MutexLock lock(&queue_mu_);
  // Starting a sender then allocates nothing but the thread.
  senders_.reserve(static_cast<size_t>(options_.pool_size));
}

absl::Status PostgresAdapter::SetUpConnection(PgConnection& c) {
  absl::StatusOr<postgres::RoleAttributes> role =
      postgres::ReadRoleAttributes(c, options_.fence_schema);
  if (!role.ok()) return role.status();
  if (absl::Status s = postgres::CheckRole(*role, options_.fence_schema,
                                           options_.allow_privileged_role);
      !s.ok()) {
    return s;
  }
  // Prepared once; nothing a safe Write sends can drop it, and the reset
  // after a dirty one prepares it again.
  // Neither setting may differ from what PostgreSQL's parser in the
  // classifier assumes, or the server could read a statement's text
  // otherwise than the classifier did (a backslash in a string, say).
  for (const auto& [name, value] : {std::pair<const char*, const char*>{
                                        "standard_conforming_strings", "on"},
                                    {"client_encoding", "UTF8"}}) {
    const char* now = PQparameterStatus(c.raw(), name);
    if (now == nullptr || std::string_view(now) != value) {
      return absl::FailedPreconditionError(absl::StrCat(
          "postgres: the server reports ", name, "=",
          now == nullptr ? "(nothing)" : now, "; the gateway needs ", value));
    }
  }
  postgres::PgResult prepared(PQprepare(c.raw(), c.fence_statement().c_str(),
                                        fence_call_sql_.c_str(), 2, nullptr));
  if (prepared == nullptr ||
      PQresultStatus(prepared.get()) != PGRES_COMMAND_OK) {
    return absl::UnavailableError(absl::StrCat(
        "postgres: preparing the fence call: ",
        prepared == nullptr
            ? postgres::ConnectionError(c.raw())
            : postgres::Trimmed(PQresultErrorMessage(prepared.get()))));
  }
  c.RecordBaseline();
  return absl::OkStatus();
}

absl::StatusOr<std::string> PostgresAdapter::CheckAtStartup() {
  absl::StatusOr<std::unique_ptr<PgConnection>> opened =
      PgConnection::Open(options_.conninfo);
  if (!opened.ok()) {
    return absl::StrCat("postgres ", options_.redacted_uri,
                        ": not reachable yet (", opened.status().message(),
                        "); every new connection's role will be checked");
  }
  std::unique_ptr<PgConnection> c = *std::move(opened);
  absl::StatusOr<postgres::RoleAttributes> role =
      postgres::ReadRoleAttributes(*c, options_.fence_schema);
  if (!role.ok()) {
    return absl::StrCat("postgres ", options_.redacted_uri,
                        ": role not checked yet (", role.status().message(),
                        ")");
  }
  absl::Status checked = postgres::CheckRole(*role, options_.fence_schema,
                                             options_.allow_privileged_role);
  if (!checked.ok()) return checked;
  return absl::StrCat(
      "postgres ", options_.redacted_uri, ": ", postgres::DescribeRole(*role),
      options_.allow_privileged_role ? " (allow_privileged_role=true)" : "");
}

absl::Status PostgresAdapter::Probe() {
  switch (PQping(options_.conninfo.c_str())) {
    case PQPING_OK:
      return absl::OkStatus();
    case PQPING_REJECT:
      return absl::UnavailableError(
          absl::StrCat("postgres ", options_.redacted_uri,
                       ": refuses connections (starting or shutting down)"));
    case PQPING_NO_RESPONSE:
      return absl::UnavailableError(
          absl::StrCat("postgres ", options_.redacted_uri, ": no response"));
    default:  // PQPING_NO_ATTEMPT: a conninfo libpq cannot use.
      return absl::UnavailableError(absl::StrCat(
          "postgres ", options_.redacted_uri, ": cannot be tried"));
  }
}

PostgresAdapter::~PostgresAdapter() {
  std::vector<std::thread> senders;
  {
    absl::MutexLock lock(&queue_mu_);
    stopping_ = true;
    queue_cv_.SignalAll();
    senders.swap(senders_);
  }
  for (std::thread& t : senders) t.join();
  expirer_.join();
  // Senders send everything queued before they stop; with none started,
  // what is queued was never sent.
  std::deque<std::unique_ptr<PendingWrite>> unsent;
  {
    absl::MutexLock lock(&queue_mu_);
    unsent.swap(queue_);
  }
  for (std::unique_ptr<PendingWrite>& w : unsent) {
    std::move(w->done)(absl::UnavailableError(
        "postgres: the adapter was shut down before the write was sent"));
  }
}

void PostgresAdapter::CancelInFlight() {
  std::deque<std::unique_ptr<PendingWrite>> unsent;
  {
    absl::MutexLock lock(&queue_mu_);
    abandoned_ = true;
    unsent.swap(queue_);
  }
  watchdog_.CancelAll();
  for (std::unique_ptr<PendingWrite>& w : unsent) {
    std::move(w->done)(absl::UnavailableError(
        "postgres: the gateway is shutting down; the write was not sent"));
  }
}

absl::Status PostgresAdapter::Apply(const WriteTarget& target,
                                    const Operations& ops, OpResults* results) {
  absl::Notification applied;
  absl::Status status;
  ApplyAsync(target, ops, results, [&](absl::Status s) {
    status = std::move(s);
    applied.Notify();
  });
  applied.WaitForNotification();
  return status;
}

bool PostgresAdapter::CallSenderForQueuedLocked() {
  // Each sender on its way takes up to kMaxBatch queued writes when it
  // gets the lock: wake another only for writes beyond those. (Waking one
  // per write woke senders that found the queue already taken, each
  // wake-up a context switch.) An idle sender is preferred to a starting
  // one, which may still have to connect. With spread_after_, a sender
  // carrying a batch is on its way too: it takes the next batch when its
  // round trip ends, so fewer connections carry bigger batches, and the
  // timer thread calls another sender for writes that wait too long.
  const size_t carrying =
      spread_after_ > absl::ZeroDuration() && !stopping_
          ? senders_.size() - static_cast<size_t>(idle_senders_ + starting_)
          : 0;
  if (queue_.size() <= (signalled_ + carrying) * kMaxBatch) {
    // A sender carrying a batch takes it next, unless it waits too long:
    // the expirer spreads it then.
    if (carrying > 0) expirer_called_ = true;
    return true;
  }
  if (idle_senders_ > signalled_) {
    ++signalled_;
    queue_cv_.Signal();
    return true;
  }
  if (queue_.size() <= (signalled_ + starting_ + carrying) * kMaxBatch) {
    // A sender that is starting may take a while to connect.
    expirer_called_ = true;
    return true;
  }
  if (stopping_ || senders_.size() >= static_cast<size_t>(options_.pool_size)) {
    // Every sender carries a batch and takes this write next.
    expirer_called_ = true;
    return true;
  }
  return StartSenderLocked() || !senders_.empty();  // Else none will.
}

void PostgresAdapter::ApplyAsync(const WriteTarget& target,
                                 const Operations& ops, OpResults* results,
                                 ApplyCallback done) {
  auto w = std::make_unique<PendingWrite>();
  w->target = &target;
  w->ops = &ops;
  w->results = results;
  w->done = std::move(done);
  w->queued_at = absl::Now();
  w->dirty = IsDirty(ops);
  PendingWrite* queued = w.get();
  absl::Status refused;
  {
    absl::MutexLock lock(&queue_mu_);
    // Checked and queued under one lock: nothing is queued once
    // CancelInFlight() has emptied the queue.
    if (abandoned_) {
      refused = absl::UnavailableError(
          "postgres: the gateway is shutting down; the write was not sent");
    } else {
      queue_.push_back(std::move(w));
      FENCEGATE_SYNC_POINT("PostgresAdapter::ApplyAsync:Queued");
      if (CallSenderForQueuedLocked()) return;
      // No sender will ever take it.
      auto it = std::find_if(queue_.begin(), queue_.end(),
                             [&](const auto& p) { return p.get() == queued; });
      w = std::move(*it);
      queue_.erase(it);
      refused = absl::ResourceExhaustedError(
          "postgres: cannot start a thread to send the write; nothing was "
          "sent");
    }
  }
  std::move(w->done)(std::move(refused));
}

void PostgresAdapter::Send() {
  // It would inherit the name of the thread that started it (gRPC's).
  pthread_setname_np(pthread_self(), "pg-sender");
  // The sender's connection while it has writes to send; given back to the
  // pool whenever it has none, so that the pool checks it before its next
  // use.
  std::optional<PgConnectionPool::Lease> lease;
  // A batch whose results are read, to be reported.
  std::vector<std::unique_ptr<PendingWrite>> read;
  // Nothing here throws but std::bad_alloc, which ends the process.
  queue_mu_.Lock();
  --starting_;
  while (true) {
    // Report the batch read at once if nothing is queued to send
    // meanwhile, or if its connection was dropped (opening another can take
    // seconds, and its retries go first); give the connection back when
    // nothing is queued.
    const bool report_now =
        !read.empty() && (queue_.empty() || !lease.has_value());
    const bool give_back = queue_.empty() && lease.has_value();
    if (report_now || give_back) {
      queue_mu_.Unlock();
      std::vector<std::unique_ptr<PendingWrite>> retries =
          ReportBatch(std::move(read));
      read.clear();
      if (give_back) lease.reset();
      queue_mu_.Lock();
      RequeueLocked(std::move(retries));
      continue;
    }
    while (queue_.empty() && !stopping_) {
      ++idle_senders_;
      queue_cv_.Wait(&queue_mu_);
      --idle_senders_;
      if (signalled_ > 0) --signalled_;
    }
    if (queue_.empty()) break;  // Stopping, with nothing left to send.
    std::vector<std::unique_ptr<PendingWrite>> batch;
    std::vector<PendingWrite*> sending;
    const absl::Time taken = absl::Now();
    while (!queue_.empty() && batch.size() < kMaxBatch) {
      if (queue_wait_ != nullptr) {
        queue_wait_->Observe(
            absl::ToDoubleSeconds(taken - queue_.front()->queued_at));
      }
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
      ++batch.back()->attempts;
      sending.push_back(batch.back().get());
      // Its session is reset after it, and if it fails, its transaction
      // block stays open, aborted, until the connection is dropped: no
      // other Write may follow it.
      if (batch.back()->dirty) break;
    }
    queue_mu_.Unlock();
    // The next batch goes out first, and the one read before it is
    // reported while the server runs it: the server does not wait for the
    // replies.
    const size_t sent = SendBatch(&lease, sending);
    std::vector<std::unique_ptr<PendingWrite>> retries =
        ReportBatch(std::move(read));
    if (lease.has_value()) {
      postgres::StatementWatchdog::Watch watch(&watchdog_, lease->conn().raw());
      ReadBatch(&lease, sending, sent, &watch);
    }
    read = std::move(batch);
    queue_mu_.Lock();
    RequeueLocked(std::move(retries));
  }
  queue_mu_.Unlock();
}

std::vector<std::unique_ptr<PostgresAdapter::PendingWrite>>
PostgresAdapter::ReportBatch(std::vector<std::unique_ptr<PendingWrite>> batch) {
  std::vector<std::unique_ptr<PendingWrite>> retries;
  for (std::unique_ptr<PendingWrite>& w : batch) {
    if (!w->status.ok() && w->retryable && w->attempts < 2) {
      // The server ended the session before anything of it was committed:
      // once more, on a fresh connection (PostgreSQL may have restarted).
      w->results->Clear();
      w->status = absl::OkStatus();
      w->retryable = false;
      w->stale = false;
      w->held = 0;
      retries.push_back(std::move(w));
      continue;
    }
    std::move(w->done)(std::move(w->status));
  }
  return retries;
}

void PostgresAdapter::RequeueLocked(
    std::vector<std::unique_ptr<PendingWrite>> retries) {
  for (auto it = retries.rbegin(); it != retries.rend(); ++it) {
    (*it)->queued_at = absl::Now();
    queue_.push_front(std::move(*it));
  }
}

bool PostgresAdapter::CanCallSenderLocked() const {
  return signalled_ + starting_ == 0 &&
         (idle_senders_ > 0 ||
          (!stopping_ &&
           senders_.size() < static_cast<size_t>(options_.pool_size)));
}

absl::Time PostgresAdapter::OldestQueuedLocked() const {
  absl::Time oldest = absl::InfiniteFuture();
  for (const std::unique_ptr<PendingWrite>& w : queue_) {
    oldest = std::min(oldest, w->queued_at);
  }
  return oldest;
}

void PostgresAdapter::SpreadLocked(absl::Time now) {
  if (spread_after_ == absl::ZeroDuration() || queue_.empty() ||
      !CanCallSenderLocked() || now - OldestQueuedLocked() < spread_after_) {
    return;
  }
  FENCEGATE_SYNC_POINT("PostgresAdapter::Spread");
  if (idle_senders_ > 0) {
    ++signalled_;
    queue_cv_.Signal();
    return;
  }
  // If no thread can be started, the senders carrying batches take the
  // writes when they come back.
  (void)StartSenderLocked();
}

bool PostgresAdapter::StartSenderLocked() {
  try {
    // Once per connection in the adapter's life.
    senders_.emplace_back([this] { Send(); });
  } catch (const std::system_error&) {
    return false;
  }
  ++starting_;  // Until the new sender first takes the lock.
  return true;
}

void PostgresAdapter::ExpireQueued() {
  pthread_setname_np(pthread_self(), "pg-expiry");
  const absl::Duration wait = absl::Milliseconds(options_.pool_wait_ms);
  const absl::Duration tick =
      std::clamp(wait / 10, absl::Milliseconds(1), absl::Milliseconds(100));
  auto stopping_or_called = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_) {
    return stopping_ || expirer_called_;
  };
  queue_mu_.Lock();
  while (!stopping_) {
    if (queue_.empty()) {
      // Nothing waits: look again in a tick, or when a write is queued
      // that only a sender carrying a batch will take (it may need
      // spreading). A write an idle or new sender takes does not wake this
      // thread: that would cost a wake-up per Write when the load is light.
      queue_mu_.AwaitWithDeadline(absl::Condition(&stopping_or_called),
                                  absl::Now() + kIdleLook);
      expirer_called_ = false;
      continue;
    }
    expirer_called_ = false;
    absl::Time next = absl::Now() + tick;
    const bool spreading = spread_after_ > absl::ZeroDuration();
    const bool could_call = spreading && CanCallSenderLocked();
    if (could_call) {
      // Wake when the oldest write has waited spread_after_ (at least 1 ms
      // from now, should calling a sender have failed).
      next = std::min(next, std::max(OldestQueuedLocked() + spread_after_,
                                     absl::Now() + absl::Milliseconds(1)));
    }
    // Also wake as soon as a sender can be called (the one on its way has
    // taken the lock), to aim at the oldest write's spread_after_ again.
    auto stopping_or_callable = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_) {
      return stopping_ || (spreading && !could_call && !queue_.empty() &&
                           CanCallSenderLocked());
    };
    queue_mu_.AwaitWithDeadline(absl::Condition(&stopping_or_callable), next);
    const absl::Time now = absl::Now();
    SpreadLocked(now);
    std::vector<std::unique_ptr<PendingWrite>> expired;
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (now - (*it)->queued_at >= wait) {
        // Observed too: the saturated pool is what the histogram is for.
        if (queue_wait_ != nullptr) {
          queue_wait_->Observe(absl::ToDoubleSeconds(now - (*it)->queued_at));
        }
        expired.push_back(std::move(*it));
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
    if (expired.empty()) continue;
    queue_mu_.Unlock();
    for (std::unique_ptr<PendingWrite>& w : expired) {
      // Never sent: nothing of it reached the database.
      std::move(w->done)(absl::UnavailableError(absl::StrCat(
          "postgres ", options_.redacted_uri, ": waited ",
          absl::FormatDuration(wait), " for one of ", options_.pool_size,
          " connections (all busy or connecting); nothing was sent")));
    }
    queue_mu_.Lock();
  }
  queue_mu_.Unlock();
}

}  // namespace fencegate
