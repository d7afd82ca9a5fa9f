// Copyright fencegate authors.
//
// (token, seq) on PostgreSQL routes (docs/fencing.md, rule 14): the fence
// row records the last applied (token, seq) in the Write's own
// transaction, so a retry after a lost reply is applied once, and an older
// seq is refused. The lost replies are real: a proxy between the adapter
// (or the gateway) and PostgreSQL lets the Write reach the server and
// commit, then cuts the connection before the reply gets back.

#include <future>
#include <string>
#include <vector>

#include "fencegate/common/seq_out_of_order.h"
#include "fencegate/common/stale_token.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "postgres/fence_schema.h"
#include "tests/cut_proxy.h"
#include "tests/fixtures.h"
#include "tests/postgres_adapter_fixture.h"

namespace fencegate {
namespace {

using ::fencegate::testing::GatewayProcess;
using ::testing::HasSubstr;

class PostgresSeqTest : public PostgresAdapterTest {
 protected:
  void SetUp() override {
    PostgresAdapterTest::SetUp();
    Exec("DROP TABLE IF EXISTS ledger");
    // No key: a Write applied twice leaves two rows.
    Exec("CREATE TABLE ledger (entry text, amount int)");
    Exec(absl::StrCat("GRANT ALL ON ledger TO ",
                      testing::PostgresServer::kWorkerRole));
  }

  static int64_t Entries(const std::string& entry) {
    return Exec("SELECT count(*) FROM ledger WHERE entry = '" + entry +
                "'")[0][0]
        .as<int64_t>();
  }
  static int64_t StoredSeq(const std::string& domain) {
    pqxx::result r = Exec("SELECT seq FROM fencegate.fences WHERE domain = '" +
                          domain + "'");
    return r.empty() ? -1 : r[0][0].as<int64_t>();
  }

  // Appends `entry` to the ledger as (token, seq) of domain "billing".
  static Operations Pay(const std::string& entry) {
    Operations ops;
    *ops.Add() = Sql("INSERT INTO ledger VALUES ($1, 10) RETURNING entry",
                     {Text(entry)});
    return ops;
  }

  struct Outcome {
    absl::Status status;
    bool replayed = false;
    OpResults results;
  };
  static Outcome Write(StorageAdapter& adapter, uint64_t token, uint64_t seq,
                       const std::string& entry) {
    Outcome out;
    const Operations ops = Pay(entry);
    WriteTarget target{"billing", token, "ledger", ""};
    target.seq = seq;
    target.replayed = &out.replayed;
    out.status = adapter.Validate(target, ops);
    if (out.status.ok()) out.status = adapter.Apply(target, ops, &out.results);
    return out;
  }

  // Writes (token, seq) through `proxy`, lets it commit, and cuts the
  // connection before the reply comes back: the write's outcome is
  // unknown to the adapter. Returns that outcome. The adapter must hold an
  // open connection (a write before it), whose replies the proxy holds.
  Outcome WriteAndLoseTheReply(StorageAdapter& adapter,
                               testing::CutProxy& proxy, uint64_t token,
                               uint64_t seq, const std::string& entry) {
    const int64_t before = Entries(entry);
    proxy.HoldReplies(true);
    std::future<Outcome> pending = std::async(
        std::launch::async, [&] { return Write(adapter, token, seq, entry); });
    // Committed: the row is visible to every session.
    EXPECT_TRUE(testing::WaitFor([&] { return Entries(entry) > before; }));
    proxy.CutAll();
    Outcome out = pending.get();
    proxy.HoldReplies(false);
    return out;
  }

  // The route's URI, through `proxy`.
  static std::string UriThrough(const testing::CutProxy& proxy) {
    return absl::StrCat("postgres://", testing::PostgresServer::kWorkerRole,
                        "@127.0.0.1:", proxy.port(), "/postgres");
  }
  // An adapter through `proxy`, started, with a connection open (one
  // write of `seq` done, 0: none), so that the proxy holds its replies.
  std::unique_ptr<StorageAdapter> AdapterThrough(testing::CutProxy& proxy,
                                                 uint64_t seq) {
    if (absl::Status s = proxy.Start(server_->port()); !s.ok()) {
      ADD_FAILURE() << s;
      return nullptr;
    }
    AdapterRegistry registry;
    EXPECT_OK(RegisterBuiltinAdapters(&registry));
    auto adapter = registry.Create(UriThrough(proxy));
    EXPECT_TRUE(adapter.ok()) << adapter.status();
    if (!adapter.ok()) return nullptr;
    EXPECT_OK(Write(**adapter, 5, seq, "warm-up").status);
    return *std::move(adapter);
  }
};

TEST_F(PostgresSeqTest, ARetryAfterTheReplyWasLostAppliesOnce) {
  testing::CutProxy proxy;
  std::unique_ptr<StorageAdapter> adapter = AdapterThrough(proxy, 1);
  ASSERT_NE(adapter, nullptr);

  Outcome lost = WriteAndLoseTheReply(*adapter, proxy, 5, 2, "invoice-7");
  EXPECT_EQ(lost.status.code(), absl::StatusCode::kUnavailable) << lost.status;
  EXPECT_THAT(lost.status.message(), HasSubstr("outcome unknown"));
  EXPECT_EQ(Entries("invoice-7"), 1);

  // The worker retries with the same (token, seq): applied already.
  Outcome retry = Write(*adapter, 5, 2, "invoice-7");
  ASSERT_OK(retry.status);
  EXPECT_TRUE(retry.replayed);
  EXPECT_EQ(retry.results.size(), 0);
  EXPECT_EQ(Entries("invoice-7"), 1);
  // And again: still once.
  EXPECT_TRUE(Write(*adapter, 5, 2, "invoice-7").replayed);
  EXPECT_EQ(Entries("invoice-7"), 1);
  // The next seq is a new write.
  Outcome next = Write(*adapter, 5, 3, "invoice-8");
  ASSERT_OK(next.status);
  EXPECT_FALSE(next.replayed);
  ASSERT_EQ(next.results.size(), 1);
  EXPECT_EQ(next.results[0].sql().rows_affected(), 1);
  EXPECT_EQ(StoredSeq("billing"), 3);
}

// A seq names one write: a retry of its (token, seq) with another payload
// is refused FAILED_PRECONDITION, as on a file route, and applies nothing
// (it used to be answered OK, replayed, without being applied).
TEST_F(PostgresSeqTest, ARetryWithAnotherPayloadIsRefused) {
  std::unique_ptr<StorageAdapter> adapter = MakeAdapter("pool_size=1");
  ASSERT_OK(Write(*adapter, 5, 2, "invoice-7").status);
  Outcome other = Write(*adapter, 5, 2, "invoice-9");
  EXPECT_THAT(other.status,
              testing::StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(other.status.message(), HasSubstr("recorded for another write"));
  EXPECT_FALSE(other.replayed);
  EXPECT_EQ(Entries("invoice-9"), 0);
  // The same payload is the write it repeats.
  Outcome same = Write(*adapter, 5, 2, "invoice-7");
  ASSERT_OK(same.status);
  EXPECT_TRUE(same.replayed);
  EXPECT_EQ(Entries("invoice-7"), 1);
}

// The same lost reply without a seq: the retry applies the write again.
// This is what the rule prevents, and it shows the test above can see a
// duplicate.
TEST_F(PostgresSeqTest, WithoutASeqTheSameRetryAppliesTwice) {
  testing::CutProxy proxy;
  std::unique_ptr<StorageAdapter> adapter = AdapterThrough(proxy, 0);
  ASSERT_NE(adapter, nullptr);
  Outcome lost = WriteAndLoseTheReply(*adapter, proxy, 5, 0, "invoice-7");
  EXPECT_EQ(lost.status.code(), absl::StatusCode::kUnavailable) << lost.status;
  ASSERT_OK(Write(*adapter, 5, 0, "invoice-7").status);
  EXPECT_EQ(Entries("invoice-7"), 2);
}

TEST_F(PostgresSeqTest, AnOlderSeqIsRefusedAsOutOfOrderAndGapsAreAllowed) {
  ASSERT_OK(Write(*adapter_, 5, 3, "a").status);
  Outcome older = Write(*adapter_, 5, 2, "b");
  EXPECT_EQ(older.status.code(), absl::StatusCode::kFailedPrecondition);
  std::optional<SeqOutOfOrderInfo> info = GetSeqOutOfOrder(older.status);
  ASSERT_TRUE(info.has_value()) << older.status;
  EXPECT_EQ(info->domain, "billing");
  EXPECT_EQ(info->token, 5u);
  EXPECT_EQ(info->seq, 2u);
  EXPECT_EQ(info->last_seq, 3u);
  EXPECT_FALSE(GetStaleToken(older.status).has_value());
  EXPECT_EQ(Entries("b"), 0);
  // A gap is allowed.
  ASSERT_OK(Write(*adapter_, 5, 10, "c").status);
  EXPECT_EQ(Entries("c"), 1);
  // A write without a seq neither checks nor moves it.
  ASSERT_OK(Write(*adapter_, 5, 0, "d").status);
  EXPECT_EQ(StoredSeq("billing"), 10);
  // A new token starts its own seq; the old token is stale, seq or not.
  ASSERT_OK(Write(*adapter_, 6, 1, "e").status);
  EXPECT_EQ(StoredSeq("billing"), 1);
  EXPECT_TRUE(GetStaleToken(Write(*adapter_, 5, 11, "f").status).has_value());
  EXPECT_EQ(Entries("f"), 0);
}

TEST_F(PostgresSeqTest, ARaiseStartsTheSeqOverAndAnEqualFenceKeepsIt) {
  ASSERT_OK(Write(*adapter_, 5, 4, "a").status);
  // Fence with the same token: the holder's seq stays.
  ASSERT_OK(adapter_->RaiseFence("billing", 5));
  EXPECT_TRUE(Write(*adapter_, 5, 4, "a").replayed);
  EXPECT_EQ(Entries("a"), 1);
  // A new holder's Fence: its seq starts over.
  ASSERT_OK(adapter_->RaiseFence("billing", 7));
  EXPECT_EQ(StoredSeq("billing"), 0);
  Outcome first = Write(*adapter_, 7, 1, "g");
  ASSERT_OK(first.status);
  EXPECT_FALSE(first.replayed);
  // A grant (fence_next) too.
  ASSERT_OK(adapter_->NextFence("billing", 1).status());
  EXPECT_EQ(StoredSeq("billing"), 0);
}

// Two attempts of one (token, seq) at once, through two gateways' adapters:
// the row lock makes the second wait for the first, then see it applied.
TEST_F(PostgresSeqTest, TwoAttemptsAtOnceApplyOnce) {
  std::unique_ptr<StorageAdapter> other = MakeAdapter("");
  ASSERT_OK(Write(*adapter_, 5, 1, "warm-up").status);
  for (uint64_t seq = 2; seq < 12; ++seq) {
    const std::string entry = absl::StrCat("pay-", seq);
    std::future<Outcome> a = std::async(
        std::launch::async, [&] { return Write(*adapter_, 5, seq, entry); });
    Outcome b = Write(*other, 5, seq, entry);
    Outcome first = a.get();
    ASSERT_OK(first.status);
    ASSERT_OK(b.status);
    EXPECT_NE(first.replayed, b.replayed) << "seq " << seq;
    EXPECT_EQ(Entries(entry), 1);
  }
}

// A database set up before (token, seq) existed: a Write with a seq is
// refused naming pg-setup, nothing applied; pg-setup adds the column and
// the function, keeping the fences.
TEST_F(PostgresSeqTest, AnOlderFenceSchemaIsUpgradedByPgSetup) {
  ASSERT_OK(Write(*adapter_, 9, 0, "before").status);
  Exec("DROP FUNCTION fencegate.fence_seq(text, bigint, bigint)");
  Exec("DROP FUNCTION fencegate.fence_seq(text, bigint, bigint, text)");
  Exec("ALTER TABLE fencegate.fences DROP COLUMN seq, DROP COLUMN seq_hash");
  Outcome refused = Write(*adapter_, 9, 1, "x");
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status.message(), HasSubstr("pg-setup"));
  EXPECT_EQ(Entries("x"), 0);
  ASSERT_OK(postgres::SetUpFenceSchema(server_->Conninfo(), "fencegate",
                                       testing::PostgresServer::kWorkerRole));
  EXPECT_EQ(StoredFence("billing"), 9);
  ASSERT_OK(Write(*adapter_, 9, 1, "x").status);
  EXPECT_TRUE(Write(*adapter_, 9, 1, "x").replayed);
  EXPECT_EQ(Entries("x"), 1);
}

// Gateways of the version before the hash call the three-argument
// fence_seq(), which pg-setup keeps: it records (token, seq) without a hash,
// and a retry of that seq is taken as the write it repeats.
TEST_F(PostgresSeqTest, AnEarlierGatewaysCallStillWorks) {
  Exec("SELECT fencegate.fence_seq('billing', 5, 1)");
  EXPECT_EQ(StoredSeq("billing"), 1);
  Outcome retry = Write(*adapter_, 5, 1, "anything");
  ASSERT_OK(retry.status);
  EXPECT_TRUE(retry.replayed);
  EXPECT_EQ(Entries("anything"), 0);
}

// A dirty Write resets its session (DISCARD ALL), which drops the prepared
// fence_seq() call: the next Write with a seq on that session still works.
TEST_F(PostgresSeqTest, AWriteWithASeqAfterASessionReset) {
  std::unique_ptr<StorageAdapter> adapter =
      MakeAdapter("allow_dirty_statements=true&pool_size=1");
  ASSERT_NE(adapter, nullptr);
  ASSERT_OK(Write(*adapter, 5, 1, "before").status);
  Operations dirty;
  *dirty.Add() = Sql("DO $$BEGIN PERFORM 1; END$$");
  WriteTarget target{"billing", 5, "ledger", ""};
  target.seq = 2;
  ASSERT_OK(adapter->Validate(target, dirty));
  OpResults ignored;
  ASSERT_OK(adapter->Apply(target, dirty, &ignored));
  ASSERT_OK(Write(*adapter, 5, 3, "after").status);
  EXPECT_TRUE(Write(*adapter, 5, 3, "after").replayed);
  EXPECT_EQ(Entries("after"), 1);
  EXPECT_EQ(StoredSeq("billing"), 3);
}

// Through the gateway: fencectl write --seq retries a write whose reply was
// lost, and the gateway answers the retry as replayed.
TEST_F(PostgresSeqTest, FencectlRetriesAWriteWhoseReplyWasLost) {
  testing::CutProxy proxy;
  ASSERT_OK(proxy.Start(server_->port()));
  testing::TempDir dir;
  auto gateway = GatewayProcess::Start(dir.path() + "/g",
                                       {"--route=db=" + UriThrough(proxy)});
  ASSERT_TRUE(gateway.ok()) << gateway.status();
  auto run = [&](uint64_t seq, const std::string& entry, std::string* out,
                 std::string* err) {
    return testing::RunCommand(
        {FENCECTL_BIN, "--addr=" + (*gateway)->address(), "--timeout=20",
         "write", "--domain=billing", "--token=5", "--resource=db/ledger",
         "--sql=INSERT INTO ledger VALUES ($1, 10)", "--param=text:" + entry,
         absl::StrCat("--seq=", seq)},
        out, err);
  };
  std::string out, err;
  ASSERT_EQ(run(1, "warm-up", &out, &err), 0) << err;
  proxy.HoldReplies(true);
  std::future<int> pending =
      std::async(std::launch::async, [&] { return run(2, "pay", &out, &err); });
  ASSERT_TRUE(testing::WaitFor([&] { return Entries("pay") == 1; }));
  proxy.CutAll();
  proxy.HoldReplies(false);
  EXPECT_EQ(pending.get(), 0) << err;
  EXPECT_THAT(out, HasSubstr("replayed"));
  EXPECT_THAT(err, HasSubstr("2 attempts"));
  EXPECT_EQ(Entries("pay"), 1);
  // An older seq: its own exit code.
  EXPECT_EQ(run(1, "late", &out, &err), 10);
  EXPECT_THAT(err, HasSubstr("out of order"));
  EXPECT_EQ(Entries("late"), 0);
}

}  // namespace
}  // namespace fencegate
