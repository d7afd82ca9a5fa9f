// Copyright fencegate authors.
//
// PostgresTokenSource against a real PostgreSQL and a real gateway: tokens
// from a sequence, the fence raised on every grant, a held lock waits, an
// expired holder is taken over with a higher token and finds its lock lost,
// tokens are never reused even when transactions abort, and `fencectl lock
// --postgres` runs a command with the token.

#include "fencegate/client/postgres/postgres_token_source.h"

#include <atomic>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "fencegate/v1/gateway.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "pqxx/pqxx"
#include "tests/gateway_fixture.h"
#include "tests/postgres_server.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

using ::fencegate::testing::PostgresServer;
using ::fencegate::testing::RunCommand;
using ::fencegate::testing::StatusIs;
using ::fencegate::testing::WaitFor;

class PostgresTokenSourceTest : public testing::GatewayFixture {
 protected:
  static void SetUpTestSuite() {
    server_ = testing::StartSuiteServer(&start_error_);
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

  void SetUp() override {
    GatewayFixture::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_NE(server_, nullptr) << start_error_;
    Exec("DROP TABLE IF EXISTS fencegate_locks");
    Exec("DROP SEQUENCE IF EXISTS fencegate_lock_tokens");
    client::PostgresTokenSourceOptions options;
    options.dsn = server_->Conninfo();
    options.gateway = channel_;
    ASSERT_OK_AND_ASSIGN(source, client::PostgresTokenSource::Create(options));
    source_ = std::move(source);
  }

  static pqxx::result Exec(const std::string& sql) {
    pqxx::connection c(server_->Conninfo());
    pqxx::nontransaction tx(c);
    return tx.exec(sql);
  }

  static PostgresServer* server_;

  static inline std::string start_error_;
  std::unique_ptr<client::PostgresTokenSource> source_;
};

PostgresServer* PostgresTokenSourceTest::server_ = nullptr;

TEST_F(PostgresTokenSourceTest, TokensFromASequenceAndTheFenceRaisedOnGrant) {
  ASSERT_OK_AND_ASSIGN(first, source_->Acquire("jobs", {}, nullptr));
  EXPECT_EQ(Highest("jobs"), first->token());
  client::LockOptions brief;
  brief.wait = absl::Milliseconds(200);
  absl::StatusOr<std::unique_ptr<client::HeldLock>> busy =
      source_->Acquire("jobs", brief, nullptr);
  EXPECT_THAT(busy, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_TRUE(absl::StrContains(busy.status().message(), "token"))
      << busy.status();
  const uint64_t t1 = first->token();
  ASSERT_OK(first->Release());
  EXPECT_EQ(Exec("SELECT count(*) FROM fencegate_locks")[0][0].as<int>(), 0);
  // Aborted transactions consume sequence values; no token comes twice.
  EXPECT_THROW(Exec("DO $$ BEGIN PERFORM nextval('fencegate_lock_tokens'); "
                    "RAISE EXCEPTION 'abort'; END $$"),
               pqxx::sql_error);
  const uint64_t consumed =
      Exec("SELECT last_value FROM fencegate_lock_tokens")[0][0].as<uint64_t>();
  EXPECT_GT(consumed, t1);  // The aborted nextval stayed taken.
  ASSERT_OK_AND_ASSIGN(second, source_->Acquire("jobs", {}, nullptr));
  EXPECT_GT(second->token(), consumed);
  EXPECT_EQ(Highest("jobs"), second->token());
}

TEST_F(PostgresTokenSourceTest, AnExpiredHolderIsTakenOverAndLosesItsLock) {
  client::LockOptions quick;
  quick.ttl = absl::Milliseconds(900);
  std::atomic<bool> lost{false};
  ASSERT_OK_AND_ASSIGN(old,
                       source_->Acquire("jobs", quick, [&] { lost = true; }));
  // The holder's lease runs out behind its back (a pause, judged by the
  // database's clock).
  Exec("UPDATE fencegate_locks SET expires_at = now() - interval '1 second'");
  ASSERT_OK_AND_ASSIGN(next, source_->Acquire("jobs", {}, nullptr));
  EXPECT_GT(next->token(), old->token());
  EXPECT_EQ(Highest("jobs"), next->token());
  EXPECT_TRUE(WaitFor([&] { return lost.load(); }, absl::Seconds(10)));
  EXPECT_THAT(old->Release(), StatusIs(absl::StatusCode::kFailedPrecondition));
  // The new holder's row is untouched by the old one's release.
  EXPECT_EQ(Exec("SELECT token FROM fencegate_locks")[0][0].as<uint64_t>(),
            next->token());
}

TEST_F(PostgresTokenSourceTest, BadInputAndFencectl) {
  client::PostgresTokenSourceOptions options;
  options.dsn = "host=127.0.0.1 nonsense_option=1";
  options.gateway = channel_;
  EXPECT_THAT(client::PostgresTokenSource::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument));
  options.dsn = server_->Conninfo();
  options.table = "locks; DROP TABLE x";
  EXPECT_THAT(client::PostgresTokenSource::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument));
  options.table = "fencegate_locks";
  options.dsn =
      absl::StrCat("host=127.0.0.1 port=", testing::FreeLoopbackPort(),
                   " connect_timeout=2");
  ASSERT_OK_AND_ASSIGN(dead, client::PostgresTokenSource::Create(options));
  EXPECT_THAT(dead->Acquire("jobs", {}, nullptr),
              StatusIs(absl::StatusCode::kUnavailable));

  std::string out, err;
  EXPECT_EQ(RunCommand({FENCECTL_BIN, "--addr=" + gateway_->address(), "lock",
                        "--postgres=" + server_->Conninfo(), "nightly", "--",
                        "/bin/sh", "-c", "echo token=$FENCEGATE_TOKEN"},
                       &out, &err),
            0)
      << err;
  EXPECT_TRUE(absl::StrContains(out, "token=")) << out;
  EXPECT_GT(Highest("nightly"), 0u);
  EXPECT_EQ(
      RunCommand({FENCECTL_BIN, "--addr=" + gateway_->address(), "lock",
                  "--postgres=nonsense_option=1", "nightly", "--", "/bin/true"},
                 &out, &err),
      2);
}

}  // namespace
}  // namespace fencegate
