// Copyright fencegate authors.

#include "storage_adapters/postgres/postgres_adapter.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "boost/asio/post.hpp"
#include "fencegate/common/thread_name.h"
#include "postgres/classifier_gauges.h"
#include "postgres/fence_hold.h"
#include "postgres/fence_schema.h"
#include "storage_adapters/postgres/role_check.h"
#include "storage_adapters/postgres/sql_text.h"

namespace fencegate {
PostgresAdapter::PostgresAdapter(postgres::RouteOptions options,
                                 const AdapterContext& context)
    : options_(std::move(options)),
      fence_call_sql_(postgres::FenceCallSql(options_.fence_schema)),
      on_warning_(context.on_warning),
      own_classifier_(context.sql_classifier != nullptr
                          ? nullptr
                          : std::make_unique<postgres::SqlClassifier>(
                                postgres::SqlClassifier::Options{})),
      classifier_(context.sql_classifier != nullptr ? context.sql_classifier
                                                    : own_classifier_.get()),
      statement_limit_(options_.statement_timeout_ms == 0
                           ? absl::InfiniteDuration()
                           : absl::Milliseconds(options_.statement_timeout_ms) +
                                 absl::Seconds(1)),
      pipeline_settings_{fence_call_sql_,
                         postgres::FenceSeqSql(options_.fence_schema),
                         postgres::ReleaseSql(options_.fence_schema),
                         static_cast<int>(options_.statement_timeout_ms),
                         options_.max_result_rows,
                         options_.max_result_bytes},
      control_pool_(
          options_.conninfo, options_.redacted_uri, kControlConnections,
          absl::Milliseconds(options_.pool_wait_ms),
          [this](PgConnection& c) { return SetUpConnection(c); },
          kControlConnectionsKept),
      work_(boost::asio::make_work_guard(io_)),
      tick_timer_(io_),
      queue_(
          postgres::BatchQueue::Options{
              options_.pool_size, absl::Milliseconds(options_.pool_wait_ms),
              std::clamp(absl::Milliseconds(options_.spread_after_ms),
                         absl::ZeroDuration(),
                         absl::Milliseconds(options_.pool_wait_ms) / 2),
              kMaxBatch, postgres::PerCallerConnections(options_),
              /*fair_share=*/options_.max_connections_per_caller == 0,
              absl::StrCat("postgres ", options_.redacted_uri),
              [this](absl::Duration waited) {
                if (queue_wait_ != nullptr) {
                  queue_wait_->Observe(absl::ToDoubleSeconds(waited));
                }
              }},
          this),
      loop_([this] {
        NameThisThread("pg-loop");
        io_.run();
      }) {
  if (options_.held_domains > 0) {
    raise_watch_.Start("fg-hold-watch", kHoldWatchInterval,
                       [this] { WatchRaises(); });
  }
  if (context.metrics.enabled()) {
    queue_wait_ = &prometheus::BuildHistogram()
                       .Name("fencegate_postgres_queue_wait_seconds")
                       .Help("Time a write waited for a PostgreSQL connection")
                       .Register(*context.metrics.registry)
                       .Add({{"route", context.route}}, LatencyBuckets());
    constexpr char kHelp[] = "PostgreSQL connections of a route, by state";
    idle_gauge_ = context.metrics.scrape_gauges->Add(
        "fencegate_postgres_connections", kHelp,
        {{"route", context.route}, {"state", "idle"}},
        [this] { return static_cast<double>(queue_.counts().idle); });
    busy_gauge_ = context.metrics.scrape_gauges->Add(
        "fencegate_postgres_connections", kHelp,
        {{"route", context.route}, {"state", "busy"}},
        [this] { return static_cast<double>(queue_.counts().busy); });
    held_gauge_ = context.metrics.scrape_gauges->Add(
        "fencegate_postgres_held_domains",
        "Domains a PostgreSQL route's connections hold the fence of (or "
        "owe a release of)",
        {{"route", context.route}},
        [this] { return static_cast<double>(hold_tally_.size()); });
  }
  if (context.metrics.enabled()) {
    auto& given_up = prometheus::BuildCounter()
                         .Name("fencegate_postgres_holds_given_up_total")
                         .Help(
                             "Held domains a PostgreSQL route's connections "
                             "gave up for a raise, by whose raise")
                         .Register(*context.metrics.registry);
    given_up_own_ = &given_up.Add({{"route", context.route}, {"raise", "own"}});
    given_up_waiting_ =
        &given_up.Add({{"route", context.route}, {"raise", "waiting"}});
    hold_closes_ =
        &prometheus::BuildCounter()
             .Name("fencegate_postgres_hold_closes_total")
             .Help(
                 "Idle PostgreSQL connections closed to give their held "
                 "domains up at once")
             .Register(*context.metrics.registry)
             .Add({{"route", context.route}});
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
    if (own_classifier_ != nullptr) {
      // A shared classifier's size is the gateway's to report.
      cache_gauges_ = postgres::AddClassifierGauges(
          *own_classifier_, *context.metrics.scrape_gauges,
          {{"route", context.route}});
    }
  }
}

absl::Status PostgresAdapter::SetUpConnection(PgConnection& c, bool* may_hold) {
  absl::StatusOr<postgres::RoleAttributes> role =
      postgres::ReadRoleAttributes(c, options_.fence_schema);
  if (!role.ok()) return role.status();
  if (may_hold != nullptr) {
    *may_hold = !absl::StrContains(role->session_functions, "advisory");
  }
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
  // Writes with a seq call fence_seq(); a schema without it leaves it
  // unprepared, and such a Write then says to run pg-setup.
  postgres::PgResult seq_prepared(
      PQprepare(c.raw(), c.fence_seq_statement().c_str(),
                pipeline_settings_.fence_seq_sql.c_str(), 4, nullptr));
  c.set_seq_prepared(seq_prepared != nullptr &&
                     PQresultStatus(seq_prepared.get()) == PGRES_COMMAND_OK);
  // What a Write's SQL may call outside pg_catalog, as of this connection.
  absl::StatusOr<postgres::CatalogNames> names =
      postgres::ReadCatalogNames(c.raw());
  if (!names.ok()) return names.status();
  for (const std::string& name : options_.session_safe_functions) {
    names->catalog_only_functions.insert(name);
    names->other_functions.erase(name);
  }
  {
    auto shared =
        std::make_shared<const postgres::CatalogNames>(*std::move(names));
    absl::MutexLock lock(&catalog_mu_);
    catalog_ = std::move(shared);
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
  // Batches in flight complete, and take what is queued behind them.
  raise_watch_.Stop();
  queue_.Stop(absl::UnavailableError(
      "postgres: the adapter was shut down before the write was sent"));
  JoinHelpers();
  // Every connection is idle: closing them cancels what the loop waits for
  // on them, and then it has nothing left to do.
  boost::asio::post(io_, [this] { tick_timer_.cancel(); });
  work_.reset();
  queue_.CloseIdle();
  loop_.join();
  JoinHelpers();  // A cancel the loop started last.
  absl::MutexLock lock(&presence_mu_);
  if (presence_ != nullptr) PQfinish(presence_);
  presence_ = nullptr;
}

void PostgresAdapter::CancelInFlight() {
  cancel_all_ = true;
  queue_.Abandon(absl::UnavailableError(
      "postgres: the gateway is shutting down; the write was not sent"));
  std::vector<std::shared_ptr<Link>> links;
  {
    absl::MutexLock lock(&links_mu_);
    for (const std::weak_ptr<Link>& l : links_) {
      if (std::shared_ptr<Link> link = l.lock()) links.push_back(link);
    }
  }
  for (const std::shared_ptr<Link>& link : links) {
    absl::MutexLock lock(&link->mu);
    if (link->reading && !link->cancelled) CancelLocked(*link);
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

void PostgresAdapter::ApplyAsync(const WriteTarget& target,
                                 const Operations& ops, OpResults* results,
                                 ApplyCallback done) {
  auto w = std::make_unique<postgres::QueuedWrite>();
  w->target = &target;
  w->ops = &ops;
  w->results = results;
  w->done = std::move(done);
  w->queued_at = absl::Now();
  Inspect(ops, &w->dirty, &w->opaque);
  w->caller = std::string(target.caller);
  // Another token than the route's connections hold the domain at: they
  // give it up first, so that its raise waits for none of them.
  if (hold_tally_.HeldBelow(target.domain, target.token)) {
    GiveUp({std::string(target.domain)});
  }
  queue_.Add(std::move(w));
}

}  // namespace fencegate
