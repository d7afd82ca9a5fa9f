// Copyright fencegate authors.
//
// A slow domain never stalls the others: a gateway process with four I/O
// threads, writes to six domains held inside PostgreSQL (each waits for an
// advisory lock the test holds), and an Acquire of each of those domains'
// leases, whose grants must wait for the writes. Meanwhile every other
// kind of call on other domains -- GetFence, Fence, a file write, Acquire,
// KeepAlive, the health check -- must still answer. (Before the lease
// service queued Acquire in its domain's lane, each such Acquire held an
// I/O thread until its domain was free, and four of them stopped the
// gateway.) And the memory that Writes queued behind a busy domain hold is
// bounded, and Writes in flight on connections that are cut are answered.

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fencegate/v1/gateway.grpc.pb.h"
#include "fencegate/v1/lease.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "tests/postgres_adapter_fixture.h"

namespace fencegate {
namespace {

using ::fencegate::testing::GatewayProcess;

// Bounds each call so that a stalled gateway fails the test instead of
// hanging it; not a performance assertion.
void SetDeadline(grpc::ClientContext* context) {
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(20));
}

// A write of `domain` that waits inside PostgreSQL for advisory lock 4242,
// which the test holds: the gateway holds the domain until it completes.
grpc::Status WriteWaitingForTheLock(v1::Gateway::Stub& gw,
                                    const std::string& domain) {
  v1::WriteRequest request;
  request.set_domain(domain);
  request.set_token(1);
  request.set_resource("db/jobs");
  request.add_ops()->mutable_sql()->set_sql(
      "SELECT pg_advisory_xact_lock(4242)");
  v1::WriteResponse response;
  grpc::ClientContext context;
  return gw.Write(&context, request, &response);
}

// What `queue` Writes sent while domain "busy" is held (by a Write waiting
// for advisory lock 4242, which `holder` holds) came to: each status, how
// many were refused with RESOURCE_EXHAUSTED, and the holding Write's own
// status. `while_held` runs once `min_refused` were refused while the
// domain was held, before the lock is let go.
struct QueuedBehind {
  std::vector<grpc::Status> statuses;
  int refused = 0;
  grpc::Status holding;
};
QueuedBehind QueueBehindBusyDomain(
    v1::Gateway::Stub& gw, pqxx::connection& holder, int queue, int min_refused,
    const std::function<grpc::Status(int)>& write,
    const std::function<void()>& while_held) {
  QueuedBehind out;
  pqxx::nontransaction(holder).exec("SELECT pg_advisory_lock(4242)");
  std::thread blocker(
      [&] { out.holding = WriteWaitingForTheLock(gw, "busy"); });
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        return pqxx::nontransaction(holder)
                   .exec1(
                       "SELECT count(*) FROM pg_locks WHERE locktype = "
                       "'advisory' AND NOT granted")[0]
                   .as<int64_t>() == 1;
      },
      absl::Seconds(20)));
  out.statuses.resize(queue);
  std::atomic<int> refused{0};
  std::vector<std::thread> writers;
  for (int i = 0; i < queue; ++i) {
    writers.emplace_back([&, i] {
      out.statuses[i] = write(i);
      if (out.statuses[i].error_code() ==
          grpc::StatusCode::RESOURCE_EXHAUSTED) {
        refused.fetch_add(1);
      }
    });
  }
  // Refused at once, while the domain is still held.
  EXPECT_TRUE(testing::WaitFor([&] { return refused.load() >= min_refused; },
                               absl::Seconds(30)));
  while_held();
  pqxx::nontransaction(holder).exec("SELECT pg_advisory_unlock(4242)");
  blocker.join();
  for (std::thread& t : writers) t.join();
  out.refused = refused.load();
  EXPECT_TRUE(out.holding.ok()) << out.holding.error_message();
  return out;
}

TEST_F(PostgresAdapterTest, ASlowDomainNeverStallsTheOthers) {
  constexpr int kSlow = 6;
  testing::TempDir dir;
  // One caller (this test) may take all 8 connections: each slow write
  // holds one.
  auto gateway = GatewayProcess::Start(
      dir.path() + "/data",
      {"--route=db=" + server_->Uri("pool_size=8&spread_after_ms=0&"
                                    "max_connections_per_caller=8"),
       "--route=files=file://" + dir.path() + "/files", "--io_threads=4"});
  ASSERT_TRUE(gateway.ok()) << gateway.status();
  auto channel = grpc::CreateChannel((*gateway)->address(),
                                     grpc::InsecureChannelCredentials());
  auto gw = v1::Gateway::NewStub(channel);
  auto lease = v1::Lease::NewStub(channel);
  auto health = grpc::health::v1::Health::NewStub(channel);

  // The test's own session holds the lock every slow write waits for.
  pqxx::connection holder(server_->Conninfo());
  pqxx::nontransaction(holder).exec("SELECT pg_advisory_lock(4242)");

  std::vector<std::thread> slow;
  std::vector<grpc::Status> slow_status(kSlow), acquire_status(kSlow);
  std::vector<v1::AcquireResponse> acquired(kSlow);
  for (int i = 0; i < kSlow; ++i) {
    slow.emplace_back([&, i] {
      slow_status[i] = WriteWaitingForTheLock(*gw, absl::StrCat("slow", i));
    });
    // One at a time, each on a connection of its own, waiting inside
    // PostgreSQL: the gateway holds its domain until it completes.
    ASSERT_TRUE(testing::WaitFor(
        [&] {
          return Exec(
                     "SELECT count(*) FROM pg_locks WHERE locktype = "
                     "'advisory' AND NOT granted")[0][0]
                     .as<int64_t>() == i + 1;
        },
        absl::Seconds(20)))
        << i;
  }
  // An Acquire of each busy domain: its grant waits for the write.
  std::vector<std::thread> acquirers;
  for (int i = 0; i < kSlow; ++i) {
    acquirers.emplace_back([&, i] {
      v1::AcquireRequest request;
      request.set_name(absl::StrCat("slow", i));
      request.set_owner("waiter");
      request.set_ttl_ms(60000);
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::seconds(60));
      acquire_status[i] = lease->Acquire(&context, request, &acquired[i]);
    });
  }

  // Everything else answers meanwhile.
  {
    v1::GetFenceRequest request;
    request.set_domain("other");
    v1::FenceState state;
    grpc::ClientContext context;
    SetDeadline(&context);
    EXPECT_TRUE(gw->GetFence(&context, request, &state).ok());
  }
  {
    v1::FenceRequest request;
    request.set_domain("other");
    request.set_token(3);
    v1::FenceState state;
    grpc::ClientContext context;
    SetDeadline(&context);
    grpc::Status s = gw->Fence(&context, request, &state);
    EXPECT_TRUE(s.ok()) << s.error_message();
  }
  {
    v1::WriteRequest request;
    request.set_domain("other");
    request.set_token(3);
    request.set_resource("files/other.txt");
    request.add_ops()->mutable_put()->set_data("fine");
    v1::WriteResponse response;
    grpc::ClientContext context;
    SetDeadline(&context);
    grpc::Status s = gw->Write(&context, request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
  }
  v1::AcquireResponse free_lock;
  {
    v1::AcquireRequest request;
    request.set_name("free");
    request.set_owner("me");
    request.set_ttl_ms(60000);
    grpc::ClientContext context;
    SetDeadline(&context);
    grpc::Status s = lease->Acquire(&context, request, &free_lock);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_TRUE(free_lock.acquired());
  }
  {
    v1::KeepAliveRequest request;
    request.set_name("free");
    request.set_lease_id(free_lock.lease_id());
    v1::KeepAliveResponse response;
    grpc::ClientContext context;
    SetDeadline(&context);
    grpc::Status s = lease->KeepAlive(&context, request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
  }
  {
    grpc::health::v1::HealthCheckRequest request;
    grpc::health::v1::HealthCheckResponse response;
    grpc::ClientContext context;
    SetDeadline(&context);
    EXPECT_TRUE(health->Check(&context, request, &response).ok());
  }
  // The slow writes were still held all along.
  EXPECT_EQ(Count(), 0);
  for (int i = 0; i < kSlow; ++i) {
    EXPECT_EQ(StoredFence(absl::StrCat("slow", i)), 0) << i;
  }

  pqxx::nontransaction(holder).exec("SELECT pg_advisory_unlock(4242)");
  for (std::thread& t : slow) t.join();
  for (std::thread& t : acquirers) t.join();
  for (int i = 0; i < kSlow; ++i) {
    EXPECT_TRUE(slow_status[i].ok())
        << i << ": " << slow_status[i].error_message();
    EXPECT_TRUE(acquire_status[i].ok())
        << i << ": " << acquire_status[i].error_message();
    EXPECT_TRUE(acquired[i].acquired()) << i;
    // The grant came after the write, above its token.
    EXPECT_EQ(acquired[i].token(), 2u) << i;
  }
}

// Writes queued behind a busy domain hold their bytes; what they may hold
// is bounded by half of memory_limit_mib (docs/operations.md, "Limits"): a
// Write past it is refused at once with RESOURCE_EXHAUSTED, while a small
// Write to another domain still runs and the queued ones land once the
// domain is free.
// PostgreSQL connections cut (pg_terminate_backend) while a gateway's queue
// threads have Writes in flight on them, before anything of them committed:
// each Write is sent once more on a fresh connection (the adapter's rule for
// a session the server ended), answered, and applied once.
TEST_F(PostgresAdapterTest, WritesInFlightOnCutConnectionsAreAnsweredOnce) {
  constexpr int kWriters = 4;
  testing::TempDir dir;
  auto gateway = GatewayProcess::Start(
      dir.path() + "/data",
      {"--route=db=" + server_->Uri("pool_size=4&spread_after_ms=0&"
                                    "max_connections_per_caller=4"),
       "--queue_threads=2"});
  ASSERT_TRUE(gateway.ok()) << gateway.status();
  pqxx::connection holder(server_->Conninfo());
  pqxx::nontransaction(holder).exec("SELECT pg_advisory_lock(4242)");
  auto waiting = [&] {
    return pqxx::nontransaction(holder)
        .exec1(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND "
            "NOT granted")[0]
        .as<int64_t>();
  };
  std::vector<std::thread> writers;
  std::vector<grpc::Status> statuses(kWriters);
  for (int i = 0; i < kWriters; ++i) {
    writers.emplace_back([&, i] {
      // A connection of its own, so that the calls spread over the queues.
      grpc::ChannelArguments args;
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      auto gw = v1::Gateway::NewStub(grpc::CreateCustomChannel(
          (*gateway)->address(), grpc::InsecureChannelCredentials(), args));
      v1::WriteRequest request;
      request.set_domain(absl::StrCat("cut", i));
      request.set_token(1);
      request.set_resource("db/jobs");
      request.add_ops()->mutable_sql()->set_sql(
          "SELECT pg_advisory_xact_lock(4242)");
      request.add_ops()->mutable_sql()->set_sql(
          absl::StrCat("INSERT INTO jobs (id) VALUES (", i, ")"));
      v1::WriteResponse response;
      grpc::ClientContext context;
      SetDeadline(&context);
      statuses[i] = gw->Write(&context, request, &response);
    });
    // One at a time, so that each waits inside PostgreSQL on a connection
    // of its own (not pipelined behind another).
    EXPECT_TRUE(testing::WaitFor([&] { return waiting() == i + 1; },
                                 absl::Seconds(20)));
  }
  // Their connections are cut; the holder's (this one) is not.
  const pqxx::result cut = pqxx::nontransaction(holder).exec(
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
      "WHERE pid <> pg_backend_pid() AND wait_event_type = 'Lock' AND "
      "query LIKE '%pg_advisory_xact_lock(4242)%'");
  EXPECT_EQ(cut.size(), kWriters);
  for (const pqxx::row& row : cut) EXPECT_TRUE(row[0].as<bool>());
  // Sent again, they wait for the lock once more (one pipeline may carry
  // several of them); then the lock is let go.
  EXPECT_TRUE(
      testing::WaitFor([&] { return waiting() >= 1; }, absl::Seconds(20)));
  pqxx::nontransaction(holder).exec("SELECT pg_advisory_unlock(4242)");
  for (std::thread& t : writers) t.join();
  for (int i = 0; i < kWriters; ++i) {
    EXPECT_TRUE(statuses[i].ok())
        << "writer " << i << ": " << statuses[i].error_message();
  }
  EXPECT_EQ(pqxx::nontransaction(holder)
                .exec1("SELECT count(*) FROM jobs")[0]
                .as<int64_t>(),
            kWriters);
}

TEST_F(PostgresAdapterTest, WritesQueuedBehindABusyDomainAreBoundedInMemory) {
  constexpr int kQueued = 8;
  const std::string big(3 << 20, 'x');  // Each reserves about 6 MiB of 32.
  testing::TempDir dir;
  auto gateway = GatewayProcess::Start(
      dir.path() + "/data",
      {"--route=db=" + server_->Uri(), "--memory_limit_mib=64"});
  ASSERT_TRUE(gateway.ok()) << gateway.status();
  auto gw = v1::Gateway::NewStub(grpc::CreateChannel(
      (*gateway)->address(), grpc::InsecureChannelCredentials()));
  auto write = [&](const std::string& domain, int64_t id,
                   const std::string& owner) {
    v1::WriteRequest request;
    request.set_domain(domain);
    request.set_token(1);
    request.set_resource("db/jobs");
    *request.add_ops() = Sql("INSERT INTO jobs (id, owner) VALUES ($1, $2)",
                             {Int(id), Text(owner)});
    v1::WriteResponse response;
    grpc::ClientContext context;
    SetDeadline(&context);
    return gw->Write(&context, request, &response);
  };
  pqxx::connection holder(server_->Conninfo());
  const QueuedBehind queued = QueueBehindBusyDomain(
      *gw, holder, kQueued, 3,
      [&](int i) { return write("busy", 100 + i, big); },
      [&] {
        EXPECT_EQ(Count(), 0);
        EXPECT_TRUE(write("other", 1, "small").ok());
      });
  int landed = 0;
  for (const grpc::Status& status : queued.statuses) {
    if (status.ok()) {
      ++landed;
    } else {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
          << status.error_message();
    }
  }
  EXPECT_EQ(landed, kQueued - queued.refused);
  EXPECT_GE(landed, 1);
  EXPECT_EQ(Count("id >= 100"), landed);
}

// A Write is charged what it holds parsed, not only its bytes: 60
// operations of 1000 empty text parameters are 0.7 MB on the wire and
// about 6 MB parsed, so that a dozen of them queued behind a busy domain
// pass the budget's 32 MiB and some are refused at once with
// RESOURCE_EXHAUSTED (charged twice their wire size, all 12 would fit).
TEST_F(PostgresAdapterTest, QueuedWritesAreChargedWhatTheyHoldParsed) {
  constexpr int kQueued = 12;
  testing::TempDir dir;
  auto gateway = GatewayProcess::Start(
      dir.path() + "/data",
      {"--route=db=" + server_->Uri(), "--memory_limit_mib=64"});
  ASSERT_TRUE(gateway.ok()) << gateway.status();
  auto gw = v1::Gateway::NewStub(grpc::CreateChannel(
      (*gateway)->address(), grpc::InsecureChannelCredentials()));
  std::string sql = "UPDATE jobs SET amount = amount WHERE owner IN ($1";
  for (int i = 2; i <= 1000; ++i) absl::StrAppend(&sql, ", $", i);
  sql += ")";
  v1::WriteRequest request;
  request.set_domain("busy");
  request.set_token(1);
  request.set_resource("db/jobs");
  for (int op = 0; op < 60; ++op) {
    v1::SqlStatement* statement = request.add_ops()->mutable_sql();
    statement->set_sql(sql);
    for (int i = 0; i < 1000; ++i) statement->add_params()->set_text("");
  }
  pqxx::connection holder(server_->Conninfo());
  const QueuedBehind queued = QueueBehindBusyDomain(
      *gw, holder, kQueued, 1,
      [&](int) {
        v1::WriteResponse response;
        grpc::ClientContext context;
        SetDeadline(&context);
        return gw->Write(&context, request, &response);
      },
      [] {});
  for (const grpc::Status& status : queued.statuses) {
    EXPECT_TRUE(status.ok() ||
                status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED)
        << status.error_message();
  }
  EXPECT_GE(queued.refused, 1);
  EXPECT_LT(queued.refused, kQueued);
}

// The rows kept for a Write's reply count in the memory budget as they
// arrive: past it, the rest are dropped and the results say truncated, as
// past max_result_bytes (here far above the budget's 32 MiB).
TEST_F(PostgresAdapterTest, ResultsKeptForAReplyCountInTheMemoryBudget) {
  testing::TempDir dir;
  auto gateway = GatewayProcess::Start(
      dir.path() + "/data",
      {"--route=db=" + server_->Uri("max_result_bytes=1073741824"),
       "--memory_limit_mib=64"});
  ASSERT_TRUE(gateway.ok()) << gateway.status();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  auto gw = v1::Gateway::NewStub(grpc::CreateCustomChannel(
      (*gateway)->address(), grpc::InsecureChannelCredentials(), args));
  v1::WriteRequest request;
  request.set_domain("big");
  request.set_token(1);
  request.set_resource("db/jobs");
  request.add_ops()->mutable_sql()->set_sql(
      "SELECT repeat('x', 1048576) FROM generate_series(1, 60)");
  v1::WriteResponse response;
  grpc::ClientContext context;
  SetDeadline(&context);
  const grpc::Status status = gw->Write(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.results_size(), 1);
  EXPECT_TRUE(response.results(0).sql().truncated());
  EXPECT_GT(response.results(0).sql().rows_size(), 0);
  EXPECT_LT(response.results(0).sql().rows_size(), 32);
}

}  // namespace
}  // namespace fencegate
