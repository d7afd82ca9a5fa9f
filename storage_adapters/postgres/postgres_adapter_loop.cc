// Copyright fencegate authors.
//
// PostgresAdapter, the connections on the event loop: sending a batch (on
// the thread the queue hands it to), reading its replies and watching its
// deadlines on the loop ("pg-loop"), opening connections and sending
// cancels on helper threads, and handing a read batch back to the queue.
// The batch's protocol is PgPipeline's (pg_pipeline.h); which Writes travel
// together is the BatchQueue's (batch_queue.h).

#include <fcntl.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <iterator>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "boost/asio/post.hpp"
#include "fencegate/common/sync_point.h"
#include "fencegate/common/thread_name.h"
#include "storage_adapters/postgres/postgres_adapter.h"

namespace fencegate {
namespace {

using Steady = std::chrono::steady_clock;

// `when` on the steady clock, for the loop's timers.
Steady::time_point SteadyAt(absl::Time when) {
  const absl::Duration in = when - absl::Now();
  if (in <= absl::ZeroDuration()) return Steady::now();
  if (in > absl::Hours(24 * 365))
    return Steady::now() + std::chrono::hours(24 * 365);
  return Steady::now() + absl::ToChronoNanoseconds(in);
}

// True if `fd` has something to read (or an error or hang-up) now.
bool ReadableNow(int fd) {
  pollfd pfd{fd, POLLIN, 0};
  return ::poll(&pfd, 1, 0) > 0;
}

}  // namespace

PostgresAdapter::Link::Link(boost::asio::io_context& io,
                            std::unique_ptr<PgConnection> conn, int socket_fd,
                            const postgres::PgPipeline::Settings* settings)
    : pg(std::move(conn)),
      socket(io, socket_fd),
      deadline(io),
      pipeline(pg.get(), settings),
      cancel(PQgetCancel(pg->raw()), PQfreeCancel) {}

// Owned by the queue while the connection is open; handlers still queued
// on the loop find the Link closed.
class PostgresAdapter::LoopConnection final
    : public postgres::BatchQueue::Connection {
 public:
  explicit LoopConnection(std::shared_ptr<Link> link)
      : link_(std::move(link)) {}
  ~LoopConnection() override {
    absl::MutexLock lock(&link_->mu);
    link_->closed = true;
    // Its waits end (operation_aborted); libpq closes its own descriptor,
    // and the session, when the last handler lets the Link go.
    // No deadline is armed: the queue destroys a connection only between
    // batches, after Complete() disarmed it.
    boost::system::error_code ignored;
    link_->socket.close(ignored);
  }
  const std::shared_ptr<Link>& link() const { return link_; }

 private:
  const std::shared_ptr<Link> link_;
};

void PostgresAdapter::Send(postgres::BatchQueue::Connection* conn,
                           postgres::Batch batch) {
  size_t batch_size = batch.size();
  FENCEGATE_SYNC_POINT_ARG("PostgresAdapter::RunBatch:Start", &batch_size);
  // A copy: Complete() may destroy the connection, and the reference.
  const std::shared_ptr<Link> link = static_cast<LoopConnection*>(conn)->link();
  {
    absl::ReleasableMutexLock lock(&link->mu);
    if (!link->pg->IdleAndAlive()) {
      // The server ended the session since the last batch (or said
      // something unasked): the batch goes to another connection, as if
      // this one had never taken it.
      lock.Release();
      for (std::unique_ptr<postgres::QueuedWrite>& w : batch) --w->attempts;
      queue_.Done(conn, /*usable=*/false, std::move(batch));
      return;
    }
    FENCEGATE_SYNC_POINT_ARG("PostgresAdapter::Send:Sending", &batch_size);
    std::vector<postgres::QueuedWrite*> writes;
    writes.reserve(batch.size());
    for (const std::unique_ptr<postgres::QueuedWrite>& w : batch) {
      writes.push_back(w.get());
    }
    link->batch = std::move(batch);
    link->cancelled = false;
    // Registered before anything is sent: the loop then sees the reply
    // arrive, however soon it does.
    WaitReadableLocked(link);
    if (link->pipeline.Send(writes) > 0) {
      link->reading = true;
      WatchLocked(link);
      const int flushed = link->pipeline.Flush();
      if (flushed == 1) WaitWritableLocked(link);
      // The reactor may have reported the socket readable before the wait
      // above was registered, and libpq reads while it sends when the
      // socket is full or broken: then the loop looks at once.
      if (flushed != 0 || PQstatus(link->pg->raw()) == CONNECTION_BAD ||
          ReadableNow(link->socket.native_handle())) {
        boost::asio::post(io_, [this, link] { OnReadable(link, false); });
      }
      if (cancel_all_) CancelLocked(*link);
      return;
    }
  }
  // Nothing went out whole: the outcomes are set, the session is unusable.
  Complete(link);
}

void PostgresAdapter::WaitReadableLocked(const std::shared_ptr<Link>& link) {
  if (link->read_pending) return;
  link->read_pending = true;
  link->socket.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                          [this, link](const boost::system::error_code&) {
                            OnReadable(link, true);
                          });
}

void PostgresAdapter::WaitWritableLocked(const std::shared_ptr<Link>& link) {
  link->socket.async_wait(
      boost::asio::posix::stream_descriptor::wait_write,
      [this, link](const boost::system::error_code&) { OnWritable(link); });
}

bool PostgresAdapter::ReadLocked(const std::shared_ptr<Link>& link) {
  while (link->pipeline.Read(link->cancelled) !=
         postgres::PgPipeline::Progress::kDone) {
    WatchLocked(link);
    // The loop's reactor reports a socket's readiness as it changes: wait
    // only once nothing is left to read, or the change would be missed.
    if (!ReadableNow(link->socket.native_handle())) {
      WaitReadableLocked(link);
      return false;
    }
  }
  return true;
}

void PostgresAdapter::OnReadable(const std::shared_ptr<Link>& link,
                                 bool from_wait) {
  {
    absl::MutexLock lock(&link->mu);
    if (from_wait) link->read_pending = false;
    if (link->closed || !link->reading || !ReadLocked(link)) return;
  }
  Complete(link);
}

void PostgresAdapter::OnWritable(const std::shared_ptr<Link>& link) {
  {
    absl::MutexLock lock(&link->mu);
    if (link->closed || !link->reading) return;
    if (link->pipeline.Flush() == 1) WaitWritableLocked(link);
    // libpq reads while it sends (and so may hold the whole reply now).
    if (!ReadLocked(link)) return;
  }
  Complete(link);
}

void PostgresAdapter::WatchLocked(const std::shared_ptr<Link>& link) {
  const size_t index = link->pipeline.reading();
  if (index >= link->batch.size() || index == link->watched) {
    return;  // All read, or the same Write as before.
  }
  // Its limit runs from here: the Writes before it are done.
  link->watched = index;
  const uint64_t watch = ++link->watch;
  const absl::Time until = std::min(absl::Now() + statement_limit_,
                                    link->batch[index]->target->deadline);
  if (until == absl::InfiniteFuture()) {
    link->deadline.cancel();
    return;
  }
  link->deadline.expires_at(SteadyAt(until));
  link->deadline.async_wait(
      [this, link, watch](const boost::system::error_code& ec) {
        if (!ec) OnDeadline(link, watch);
      });
}

void PostgresAdapter::OnDeadline(const std::shared_ptr<Link>& link,
                                 uint64_t watch) {
  absl::MutexLock lock(&link->mu);
  if (link->closed || !link->reading || watch != link->watch) {
    return;  // Completed, or the next Write is watched now.
  }
  // Each Write is watched on its own: one after a cancelled one may be
  // cancelled too.
  CancelLocked(*link);
}

void PostgresAdapter::CancelLocked(Link& link) {
  link.cancelled = true;
  // PQcancel opens a connection to the server: never on the loop.
  std::shared_ptr<PGcancel> cancel = link.cancel;
  if (cancel == nullptr) return;
  (void)Spawn("pg-cancel", [cancel] {
    char error[256];
    (void)PQcancel(cancel.get(), error, sizeof error);
  });
}

void PostgresAdapter::Complete(const std::shared_ptr<Link>& link) {
  postgres::Batch batch;
  bool usable = false;
  {
    absl::MutexLock lock(&link->mu);
    link->reading = false;
    link->watched = kNotWatched;
    link->deadline.cancel();
    batch = std::move(link->batch);
    link->batch.clear();
    // A cancel already sent may still reach the server, and hit the next
    // batch: do not reuse the session.
    usable = link->pipeline.usable() && !link->cancelled &&
             SessionUnchanged(*link->pg, batch);
  }
  FENCEGATE_SYNC_POINT("PostgresAdapter::Complete");
  postgres::Batch retries;
  postgres::Batch report;
  for (std::unique_ptr<postgres::QueuedWrite>& w : batch) {
    if (!w->status.ok() && w->retryable && w->attempts < 2) {
      // The server ended the session before anything of it was committed:
      // once more, on a fresh connection (PostgreSQL may have restarted).
      w->results->Clear();
      w->status = absl::OkStatus();
      w->retryable = false;
      w->stale = false;
      w->held = 0;
      w->replayed = false;
      w->later_seq = 0;
      retries.push_back(std::move(w));
    } else {
      report.push_back(std::move(w));
    }
  }
  // The next batch goes out first, so that the server runs it while these
  // outcomes are reported.
  queue_.Done(link->owner, usable, std::move(retries));
  for (std::unique_ptr<postgres::QueuedWrite>& w : report) {
    std::move(w->done)(std::move(w->status));
  }
}

void PostgresAdapter::Open() {
  const bool started = Spawn("pg-connect", [this] {
    FENCEGATE_SYNC_POINT("PostgresAdapter::Open:Start");
    absl::StatusOr<std::unique_ptr<LoopConnection>> opened = OpenConnection();
    if (opened.ok()) {
      queue_.Opened(*std::move(opened));
    } else {
      queue_.OpenFailed(opened.status());
    }
  });
  if (!started) {
    queue_.OpenFailed(absl::ResourceExhaustedError(
        "postgres: cannot start a thread to open a connection; nothing was "
        "sent"));
  }
}

absl::StatusOr<std::unique_ptr<PostgresAdapter::LoopConnection>>
PostgresAdapter::OpenConnection() {
  absl::StatusOr<std::unique_ptr<PgConnection>> opened =
      PgConnection::Open(options_.conninfo);
  if (!opened.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "postgres ", options_.redacted_uri, ": ", opened.status().message()));
  }
  std::unique_ptr<PgConnection> conn = *std::move(opened);
  bool may_hold = false;
  if (absl::Status s = SetUpConnection(*conn, &may_hold); !s.ok()) return s;
  if (may_hold) {
    if (absl::Status s = ArmConnection(*conn); !s.ok()) return s;
  }
  if (PQsetnonblocking(conn->raw(), 1) != 0) {
    return absl::UnavailableError(
        absl::StrCat("postgres ", options_.redacted_uri,
                     ": cannot make the connection non-blocking: ",
                     postgres::ConnectionError(conn->raw())));
  }
  // The loop watches a descriptor of its own for the same socket: libpq
  // closes its one when it finds the connection broken, and the loop must
  // still see the end (and never watch a number reused by another file).
  const int socket_fd = ::fcntl(PQsocket(conn->raw()), F_DUPFD_CLOEXEC, 0);
  if (socket_fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("postgres ", options_.redacted_uri,
                     ": cannot watch the connection: ", std::strerror(errno)));
  }
  auto link = std::make_shared<Link>(io_, std::move(conn), socket_fd,
                                     &pipeline_settings_);
  auto loop_conn = std::make_unique<LoopConnection>(link);
  link->owner = loop_conn.get();
  absl::MutexLock lock(&links_mu_);
  std::erase_if(links_,
                [](const std::weak_ptr<Link>& l) { return l.expired(); });
  links_.push_back(link);
  return loop_conn;
}

void PostgresAdapter::TickAt(absl::Time when) {
  boost::asio::post(io_, [this, when] {
    if (when >= tick_at_) return;
    tick_at_ = when;
    tick_timer_.expires_at(SteadyAt(when));
    tick_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;  // Moved earlier, or shut down.
      tick_at_ = absl::InfiniteFuture();
      queue_.Tick(absl::Now());
    });
  });
}

bool PostgresAdapter::Spawn(const char* name,
                            absl::AnyInvocable<void() &&> fn) {
  std::list<Helper> finished;
  absl::MutexLock lock(&helpers_mu_);
  for (auto it = helpers_.begin(); it != helpers_.end();) {
    auto next = std::next(it);
    if (it->finished) finished.splice(finished.end(), helpers_, it);
    it = next;
  }
  // Finished: each has let go of the lock for good.
  for (Helper& h : finished) h.thread.join();
  Helper& helper = helpers_.emplace_back();
  try {
    helper.thread =
        std::thread([this, name, &helper, fn = std::move(fn)]() mutable {
          // It would inherit the name of the thread that started it.
          NameThisThread(name);
          std::move(fn)();
          absl::MutexLock done(&helpers_mu_);
          helper.finished = true;
        });
  } catch (const std::system_error&) {
    helpers_.pop_back();
    return false;
  }
  return true;
}

void PostgresAdapter::JoinHelpers() {
  std::list<Helper> helpers;
  {
    absl::MutexLock lock(&helpers_mu_);
    helpers.swap(helpers_);
  }
  for (Helper& h : helpers) h.thread.join();
}

bool PostgresAdapter::SessionUnchanged(PgConnection& conn,
                                       const postgres::Batch& batch) {
  const std::string changed = conn.ChangedParameter();
  if (changed.empty()) return true;
  // A statement the classifier let through changed the session (a function
  // that sets a reported parameter, say): close the connection rather than
  // hand the change to the next Write. Once per connection, since it is
  // closed now.
  if (escapes_ != nullptr) escapes_->Increment();
  if (on_warning_) {
    std::vector<std::string> ids;
    for (const std::unique_ptr<postgres::QueuedWrite>& w : batch) {
      ids.emplace_back(w->target->request_id.empty()
                           ? "-"
                           : std::string(w->target->request_id));
    }
    on_warning_(
        absl::StrCat("postgres: a Write changed its pooled session (", changed,
                     "); the connection was closed. request_ids of its batch: ",
                     absl::StrJoin(ids, ",")));
  }
  return false;
}

}  // namespace fencegate
