// Copyright fencegate authors.
//
// WriteWithRetry (client/include/fencegate/client/write_retry.h) against a
// gateway address nothing listens on: every attempt is UNAVAILABLE.

#include "fencegate/client/write_retry.h"

#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "tests/fixtures.h"

namespace fencegate::client {
namespace {

class WriteRetryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const int port = testing::FreeLoopbackPort();
    ASSERT_NE(port, 0);
    stub_ = v1::Gateway::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
    request_.set_domain("billing");
    request_.set_token(5);
    request_.set_resource("db/ledger");
    request_.add_ops()->mutable_sql()->set_sql("SELECT 1");
    options_.max_attempts = 3;
    options_.initial_backoff = absl::Milliseconds(1);
    options_.attempt_timeout = absl::Seconds(5);
  }

  std::unique_ptr<v1::Gateway::Stub> stub_;
  v1::WriteRequest request_;
  WriteRetryOptions options_;
};

TEST_F(WriteRetryTest, AWriteWithASeqIsRetriedUpToItsAttempts) {
  request_.set_seq(7);
  int attempts = 0;
  absl::StatusOr<v1::WriteResponse> r =
      WriteWithRetry(*stub_, request_, options_, &attempts);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(attempts, 3);
}

TEST_F(WriteRetryTest, AWriteWithoutASeqIsSentOnce) {
  int attempts = 0;
  absl::StatusOr<v1::WriteResponse> r =
      WriteWithRetry(*stub_, request_, options_, &attempts);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(attempts, 1);
}

TEST_F(WriteRetryTest, OnlyALostOutcomeIsRetried) {
  EXPECT_TRUE(IsOutcomeUnknown(absl::StatusCode::kUnavailable));
  EXPECT_TRUE(IsOutcomeUnknown(absl::StatusCode::kDeadlineExceeded));
  EXPECT_FALSE(IsOutcomeUnknown(absl::StatusCode::kFailedPrecondition));
  EXPECT_FALSE(IsOutcomeUnknown(absl::StatusCode::kAborted));
  EXPECT_FALSE(IsOutcomeUnknown(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace fencegate::client
