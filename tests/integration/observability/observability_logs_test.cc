// Copyright fencegate authors.
//
// The operational log with --log_format=json, against a real gateway and a
// real PostgreSQL (docs/operations.md, "Logs"): every entry is one line
// holding one JSON object, a multi-line PostgreSQL error included; a
// request's request_id and the trace id of its W3C traceparent are fields
// of their own; a write whose deadline passed before it was applied is
// logged with its request_id. And TraceIdOf's reading of traceparent.

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "fencegate/v1/gateway.grpc.pb.h"
#include "fencegate/v1/log.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "observability/trace_context.h"
#include "pqxx/pqxx"
#include "tests/json_lines.h"
#include "tests/postgres_server.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

using ::fencegate::testing::GatewayProcess;
using ::fencegate::testing::ParseJsonLines;
using ::fencegate::testing::PostgresServer;
using ::fencegate::testing::ReadFile;
using ::fencegate::testing::WaitFor;

constexpr char kTraceparent[] =
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
constexpr char kTraceId[] = "4bf92f3577b34da6a3ce929d0e0e4736";

TEST(TraceIdOfTest, ReadsWellFormedTraceparentsOnly) {
  EXPECT_EQ(TraceIdOf(kTraceparent), kTraceId);
  // A later version, with more after its version-00 part.
  EXPECT_EQ(TraceIdOf(std::string("01") + (kTraceparent + 2) + "-extra"),
            kTraceId);
  for (const char* bad : {
           "",
           "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
           "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
           "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
           "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
           "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
           "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
       }) {
    EXPECT_EQ(TraceIdOf(bad), "") << bad;
  }
}

class JsonLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(pg, PostgresServer::Start());
    pg_ = std::move(pg);
    ASSERT_OK_AND_ASSIGN(
        gateway, GatewayProcess::Start(
                     dir_.path() + "/data",
                     {"--route=db=" + pg_->Uri(),
                      "--route=files=file://" + dir_.path() + "/data/files",
                      "--log_format=json"}));
    gateway_ = std::move(gateway);
    channel_ = grpc::CreateChannel(gateway_->address(),
                                   grpc::InsecureChannelCredentials());
  }

  grpc::Status Write(const std::string& domain, uint64_t token,
                     const std::string& resource, const std::string& sql,
                     const std::string& request_id,
                     absl::Duration deadline = absl::Seconds(20),
                     bool traced = false) {
    v1::WriteRequest request;
    request.set_domain(domain);
    request.set_token(token);
    request.set_resource(resource);
    request.set_request_id(request_id);
    if (sql.empty()) {
      request.add_ops()->mutable_put()->set_data("x");
    } else {
      request.add_ops()->mutable_sql()->set_sql(sql);
    }
    v1::WriteResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
    if (traced) context.AddMetadata("traceparent", kTraceparent);
    return v1::Gateway::NewStub(channel_)->Write(&context, request, &response);
  }

  // Every line of the gateway's log, each parsed as one LogEntry; a line
  // that is not one fails the test.
  std::vector<v1::LogEntry> Entries() {
    absl::StatusOr<std::string> text = ReadFile(gateway_->log_path());
    EXPECT_TRUE(text.ok()) << text.status();
    if (!text.ok()) return {};
    return ParseJsonLines<v1::LogEntry>(*text);
  }
  // The first entry with `request_id` whose message contains `text`.
  std::optional<v1::LogEntry> Find(const std::string& request_id,
                                   const std::string& text) {
    for (const v1::LogEntry& e : Entries()) {
      if (e.request_id() == request_id &&
          absl::StrContains(e.message(), text)) {
        return e;
      }
    }
    return std::nullopt;
  }

  testing::TempDir dir_;
  std::unique_ptr<PostgresServer> pg_;
  std::unique_ptr<GatewayProcess> gateway_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(JsonLogTest, AMultiLinePostgresErrorIsOneJsonLine) {
  // A bad literal: PostgreSQL's message spans lines (LINE 1: ..., ^).
  EXPECT_FALSE(Write("jobs", 1, "db/t", "SELECT\n'x'::int", "multi").ok());
  std::optional<v1::LogEntry> entry;
  ASSERT_TRUE(
      WaitFor([&] { return (entry = Find("multi", "failed")).has_value(); }));
  EXPECT_EQ(entry->severity(), "error");
  EXPECT_TRUE(absl::StrContains(entry->message(), "invalid input syntax"))
      << entry->message();
  EXPECT_TRUE(entry->has_time());
}

TEST_F(JsonLogTest, RequestIdAndTraceIdAreFieldsOfTheirOwn) {
  ASSERT_TRUE(Write("jobs", 5, "files/a", "", "first").ok());
  EXPECT_EQ(Write("jobs", 4, "files/a", "", "late", absl::Seconds(20),
                  /*traced=*/true)
                .error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  std::optional<v1::LogEntry> entry;
  ASSERT_TRUE(
      WaitFor([&] { return (entry = Find("late", "stale")).has_value(); }));
  EXPECT_EQ(entry->trace_id(), kTraceId);
  EXPECT_EQ(entry->severity(), "warning");
  EXPECT_TRUE(absl::StrContains(entry->message(), kTraceId));
}

TEST_F(JsonLogTest, AWriteWhoseDeadlinePassedInItsQueueIsLogged) {
  // The first write holds domain "slow" for 4 s; the second waits for it
  // with a deadline that passes meanwhile.
  std::thread slow([&] {
    EXPECT_TRUE(Write("slow", 1, "db/t", "SELECT pg_sleep(4)", "holder").ok());
  });
  // Until the holder's statement runs: it holds the domain then.
  EXPECT_TRUE(WaitFor([&] {
    try {
      pqxx::connection c(pg_->Conninfo());
      pqxx::nontransaction tx(c);
      return tx.exec(
                   "SELECT 1 FROM pg_stat_activity WHERE state = 'active' "
                   "AND query LIKE '%pg_sleep(4)%' AND pid <> "
                   "pg_backend_pid()")
                 .size() > 0;
    } catch (const std::exception&) {
      return false;  // Asked again.
    }
  }));
  // Long enough for the call to reach the gateway on a loaded machine,
  // and well short of what is left of the holder's 4 s.
  EXPECT_EQ(Write("slow", 1, "files/b", "", "waiter", absl::Milliseconds(1500))
                .error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  slow.join();
  std::optional<v1::LogEntry> entry;
  EXPECT_TRUE(WaitFor([&] {
    return (entry = Find("waiter", "cancelled before")).has_value();
  }));
  absl::StatusOr<std::string> file = ReadFile(dir_.path() + "/data/files/b");
  EXPECT_FALSE(file.ok());  // Nothing was written.
}

}  // namespace
}  // namespace fencegate
