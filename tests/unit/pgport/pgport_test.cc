// Copyright fencegate authors.
//
// The PostgreSQL port's pieces without I/O: which replies of the server
// reach the client (pgport/response_queue.h), where transactions begin
// (pgport/transaction_tracker.h), the quoting of the SQL the port writes
// itself (pgport/sql_quote.h), read back by PostgreSQL's parser, and the
// memory a message reader reserves (pgport/frame_reader.h), over a
// loopback socket.

#include <future>
#include <string>
#include <vector>

#include "boost/asio/use_future.hpp"
#include "fencegate/common/memory_budget.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pgport/frame_reader.h"
#include "pgport/response_queue.h"
#include "pgport/sql_quote.h"
#include "pgport/transaction_tracker.h"
#include "pgwire/backend.h"
#include "pgwire/frame.h"
#include "postgres/session_sql.h"
#include "tests/test_util.h"

namespace fencegate::pgport {
namespace {

using ::fencegate::testing::ExpectError;

// Feeds `message` (one encoded backend message) to `queue`.
ReplyOutcome Reply(ResponseQueue& queue, const std::string& message) {
  absl::StatusOr<std::optional<pgwire::Frame>> frame =
      pgwire::NextFrame(message, 1 << 20);
  EXPECT_TRUE(frame.ok() && frame->has_value());
  ReplyOutcome outcome;
  EXPECT_OK(queue.OnReply(**frame, &outcome));
  return outcome;
}

std::string Complete(absl::string_view tag) {
  return pgwire::Encode(pgwire::CommandComplete{tag});
}
std::string Row(absl::string_view value) {
  return pgwire::Encode(pgwire::DataRow{{value}});
}
std::string Ready(
    pgwire::TransactionStatus s = pgwire::TransactionStatus::kIdle) {
  return pgwire::Encode(pgwire::ReadyForQuery{s});
}
const std::string kBindComplete = pgwire::Encode(pgwire::BindComplete{});

TEST(ResponseQueueTest, RepliesToThePortsOwnMessagesAreDropped) {
  ResponseQueue queue;
  std::string to_client;
  queue.Push(OwnOwed(Awaited::kBind), &to_client);
  queue.Push(OwnOwed(Awaited::kExecute), &to_client);
  queue.Push(ClientOwed(Awaited::kBind), &to_client);
  queue.Push(ClientOwed(Awaited::kExecute), &to_client);
  queue.Push(ClientOwed(Awaited::kSync), &to_client);
  EXPECT_EQ(to_client, "");
  std::string seen;
  for (const std::string& m : {kBindComplete, Row("7"), Complete("SELECT 1"),
                               kBindComplete, Complete("UPDATE 1")}) {
    ReplyOutcome o = Reply(queue, m);
    seen += o.to_client;
    EXPECT_FALSE(o.settled.has_value());
  }
  EXPECT_EQ(seen, kBindComplete + Complete("UPDATE 1"));
  ReplyOutcome last = Reply(queue, Ready());
  EXPECT_EQ(last.to_client, Ready());
  ASSERT_TRUE(last.settled.has_value());
  EXPECT_EQ(*last.settled, pgwire::TransactionStatus::kIdle);
  EXPECT_TRUE(queue.empty());
}

TEST(ResponseQueueTest, AnErrorOfThePortsOwnReachesTheClientAndSkipsToSync) {
  ResponseQueue queue;
  std::string to_client;
  queue.Push(OwnOwed(Awaited::kBind), &to_client);
  queue.Push(OwnOwed(Awaited::kExecute), &to_client);
  queue.Push(ClientOwed(Awaited::kBind), &to_client);
  queue.Push(ClientOwed(Awaited::kExecute), &to_client);
  queue.Push(ClientOwed(Awaited::kSync), &to_client);
  EXPECT_EQ(Reply(queue, kBindComplete).to_client, "");
  const std::string error = pgwire::EncodeError(
      "ERROR", "FG001", "stale fencing token 5 for domain 'jobs'", "9");
  ReplyOutcome o = Reply(queue, error);
  EXPECT_EQ(o.to_client, error);
  EXPECT_TRUE(o.own_error);
  // The server skipped the client's Bind and Execute: only Sync is owed.
  EXPECT_EQ(queue.size(), 1u);
  EXPECT_EQ(Reply(queue, Ready()).to_client, Ready());
}

// After an error in the extended protocol the server drops every message
// up to Sync, Queries included: nothing is owed for them (a session that
// waited for their replies never ended, and held its slot for ever).
TEST(ResponseQueueTest, QueriesAfterAnExtendedErrorAreSkippedToo) {
  ResponseQueue queue;
  std::string to_client;
  queue.Push(ClientOwed(Awaited::kParse), &to_client);
  queue.Push(ClientOwed(Awaited::kBind), &to_client);
  queue.Push(ClientOwed(Awaited::kExecute), &to_client);
  queue.Push(ClientOwed(Awaited::kQuery), &to_client);
  queue.Push(ClientOwed(Awaited::kQuery), &to_client);
  queue.Push(ClientOwed(Awaited::kSync), &to_client);
  EXPECT_EQ(Reply(queue, pgwire::Encode(pgwire::ParseComplete{})).to_client,
            pgwire::Encode(pgwire::ParseComplete{}));
  EXPECT_EQ(Reply(queue, kBindComplete).to_client, kBindComplete);
  const std::string error =
      pgwire::EncodeError("ERROR", "22012", "division by zero");
  EXPECT_EQ(Reply(queue, error).to_client, error);
  EXPECT_EQ(queue.size(), 1u);
  ReplyOutcome last = Reply(queue, Ready());
  EXPECT_EQ(last.to_client, Ready());
  EXPECT_TRUE(queue.empty());
}

TEST(ResponseQueueTest, AQuerysOwnStatementsAreDroppedOneByOne) {
  ResponseQueue queue;
  std::string to_client;
  Expected query = ClientOwed(Awaited::kQuery);
  query.own_statements = {true, false, false, true, false};
  queue.Push(query, &to_client);
  std::string seen;
  const pgwire::Column column;
  for (const std::string& m :
       {pgwire::Encode(pgwire::RowDescription{{column}}), Row("5"),
        Complete("SELECT 1"), Complete("UPDATE 1"), Complete("COMMIT"),
        pgwire::Encode(pgwire::RowDescription{{column}}), Row("5"),
        Complete("SELECT 1"), Complete("UPDATE 2"), Ready()}) {
    seen += Reply(queue, m).to_client;
  }
  EXPECT_EQ(seen, Complete("UPDATE 1") + Complete("COMMIT") +
                      Complete("UPDATE 2") + Ready());
}

TEST(ResponseQueueTest, ARefusedMessagesErrorIsReplacedAndLocalRepliesWait) {
  ResponseQueue queue;
  std::string to_client;
  const std::string mine = pgwire::EncodeError("ERROR", "25006", "read-only");
  queue.Push(ClientOwed(Awaited::kSync), &to_client);
  queue.Push(Replacing(Awaited::kQuery, mine), &to_client);
  queue.Push(LocalReply("local"), &to_client);
  EXPECT_EQ(to_client, "");  // its turn has not come
  std::string seen = Reply(queue, Ready()).to_client;
  seen += Reply(queue, pgwire::EncodeError("ERROR", "42601",
                                           "syntax error at or near"))
              .to_client;
  ReplyOutcome last = Reply(queue, Ready(pgwire::TransactionStatus::kFailed));
  seen += last.to_client;
  EXPECT_EQ(seen, Ready() + mine + Ready(pgwire::TransactionStatus::kFailed) +
                      "local");
  EXPECT_TRUE(queue.empty());
  // With nothing owed, a local reply goes at once.
  queue.Push(LocalReply("now"), &to_client);
  EXPECT_EQ(to_client, "now");
}

TEST(ResponseQueueTest, AReplyNothingAskedForEndsTheSession) {
  ResponseQueue queue;
  absl::StatusOr<std::optional<pgwire::Frame>> frame =
      pgwire::NextFrame(kBindComplete, 1 << 20);
  ASSERT_TRUE(frame.ok() && frame->has_value());
  ReplyOutcome o;
  ExpectError(queue.OnReply(**frame, &o), absl::StatusCode::kInvalidArgument,
              "nothing asked for");
  std::string to_client;
  queue.Push(ClientOwed(Awaited::kParse), &to_client);
  ExpectError(queue.OnReply(**frame, &o), absl::StatusCode::kInvalidArgument,
              "out of turn");
  // Notices come at any time and always pass.
  const std::string notice =
      pgwire::Encode(pgwire::NoticeResponse{{{{'M', "hello"}}}});
  EXPECT_EQ(Reply(queue, notice).to_client, notice);
}

std::vector<postgres::SessionStatement> Statements(absl::string_view sql) {
  absl::StatusOr<std::vector<postgres::SessionStatement>> s =
      postgres::ClassifySessionSql(sql);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : std::vector<postgres::SessionStatement>{};
}

// Where the tracker puts fences in `sql`: "F" before or after each
// statement that begins a transaction, "s" for each statement.
std::string Fences(TransactionTracker& tracker, absl::string_view sql) {
  std::string out;
  for (const auto& s : Statements(sql)) {
    if (tracker.BeginsBefore(s)) out += "F";
    out += "s";
    if (tracker.BeginsAfter(s)) out += "F";
  }
  tracker.EndOfBatch();
  return out;
}

TEST(TransactionTrackerTest, EachTransactionsBeginningIsSeenOnce) {
  TransactionTracker t;
  EXPECT_EQ(Fences(t, "UPDATE a SET x = 1; SELECT 1"), "Fss");
  EXPECT_TRUE(t.idle());  // the implicit transaction ended with the string
  EXPECT_EQ(Fences(t, "UPDATE a SET x = 1; COMMIT; UPDATE a SET x = 2"),
            "FssFs");
  EXPECT_EQ(Fences(t, "BEGIN; UPDATE a SET x = 1"), "sFs");
  EXPECT_FALSE(t.idle());
  EXPECT_EQ(Fences(t, "UPDATE a SET x = 2"), "s");  // the block goes on
  EXPECT_EQ(Fences(t, "COMMIT AND CHAIN; UPDATE a SET x = 3"), "sFs");
  EXPECT_EQ(Fences(t, "ROLLBACK; SELECT 1"), "sFs");
  // BEGIN inside an implicit transaction turns it into the block.
  EXPECT_EQ(Fences(t, "UPDATE a SET x = 1; BEGIN; UPDATE a SET x = 2"), "Fsss");
  EXPECT_FALSE(t.idle());
  t.Settle(pgwire::TransactionStatus::kIdle);
  EXPECT_TRUE(t.idle());
  EXPECT_EQ(Fences(t, "SET fencegate.token = 5"), "s");
}

TEST(SqlQuoteTest, ValuesReadBackExactlyWhateverTheyHold) {
  for (const char* value :
       {"jobs", "it's", "$fg$", "a$fg", "x$fg$y$fgg$", "back\\slash", "", "$",
        "line\nbreak", "\"quoted\""}) {
    const std::string sql =
        absl::StrCat("SET fencegate.domain = ", QuoteLiteral(value));
    std::vector<postgres::SessionStatement> s = Statements(sql);
    ASSERT_EQ(s.size(), 1u) << sql;
    EXPECT_EQ(s[0].effect, postgres::SessionEffect::kGatewaySet) << sql;
    EXPECT_EQ(s[0].value, value) << sql;
  }
  EXPECT_EQ(QuoteIdentifier("a\"b"), "\"a\"\"b\"");
}

// A connected pair of loopback sockets.
struct SocketPair {
  explicit SocketPair(asio::io_context& io) : reader(io), writer(io) {
    tcp::acceptor acceptor(io,
                           tcp::endpoint(asio::ip::address_v4::loopback(), 0));
    writer.connect(acceptor.local_endpoint());
    acceptor.accept(reader);
  }
  tcp::socket reader;
  tcp::socket writer;
};

// `reader`'s next message from `socket`, run to its end on `io`.
absl::StatusOr<pgwire::Frame> ReadOne(asio::io_context& io, FrameReader& reader,
                                      tcp::socket& socket) {
  std::future<absl::StatusOr<pgwire::Frame>> next =
      asio::co_spawn(io, reader.Next(socket), asio::use_future);
  io.restart();
  io.run();
  return next.get();
}

TEST(FrameReaderTest, ALargeMessageIsReservedWhileHeldAndRefusedPastTheBudget) {
  asio::io_context io;
  SocketPair sockets(io);
  const std::string big =
      pgwire::Encode(pgwire::Query{std::string(300 << 10, 'x')});
  const std::string small = pgwire::Encode(pgwire::Query{"SELECT 1"});

  MemoryBudget budget(1 << 20);
  FrameReader reader(16 << 20, &budget);
  asio::write(sockets.writer, asio::buffer(small + big + small));
  ASSERT_OK_AND_ASSIGN(first, ReadOne(io, reader, sockets.reader));
  EXPECT_EQ(first.size, small.size());
  EXPECT_EQ(budget.used(), 0u) << "a small message is not reserved";
  ASSERT_OK_AND_ASSIGN(second, ReadOne(io, reader, sockets.reader));
  EXPECT_EQ(second.size, big.size());
  EXPECT_EQ(budget.used(), big.size()) << "held while the frame is";
  ASSERT_OK_AND_ASSIGN(third, ReadOne(io, reader, sockets.reader));
  EXPECT_EQ(third.size, small.size());
  EXPECT_EQ(budget.used(), 0u) << "given back with the next message";
  EXPECT_FALSE(reader.out_of_memory());

  // Past what the budget has left, the message is refused before it is read.
  MemoryBudget tight(200 << 10);
  FrameReader refusing(16 << 20, &tight);
  asio::write(sockets.writer, asio::buffer(big));
  ExpectError(ReadOne(io, refusing, sockets.reader),
              absl::StatusCode::kResourceExhausted, "memory_limit_mib");
  EXPECT_TRUE(refusing.out_of_memory());
  EXPECT_EQ(tight.used(), 0u);
}

}  // namespace
}  // namespace fencegate::pgport
