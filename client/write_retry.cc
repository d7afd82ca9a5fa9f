// Copyright fencegate authors.

#include "fencegate/client/write_retry.h"

#include <algorithm>
#include <chrono>

#include "absl/random/random.h"
#include "absl/time/clock.h"
#include "fencegate/common/grpc_status.h"

namespace fencegate::client {

bool IsOutcomeUnknown(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable ||
         code == absl::StatusCode::kDeadlineExceeded;
}

absl::StatusOr<v1::WriteResponse> WriteWithRetry(
    v1::Gateway::StubInterface& stub, const v1::WriteRequest& request,
    const WriteRetryOptions& options, int* attempts) {
  const int max_attempts =
      request.seq() == 0 ? 1 : std::max(1, options.max_attempts);
  absl::BitGen random;
  absl::Duration backoff = options.initial_backoff;
  absl::Status last;
  int made = 0;
  while (made < max_attempts) {
    if (made > 0) {
      // Full jitter: a random wait up to the backoff, so that the workers a
      // blip cut off together do not come back together.
      absl::SleepFor(backoff * absl::Uniform(random, 0.0, 1.0));
      backoff = std::min(backoff * 2, options.max_backoff);
    }
    ++made;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         absl::ToChronoMilliseconds(options.attempt_timeout));
    v1::WriteResponse response;
    last = FromGrpcStatus(stub.Write(&context, request, &response));
    if (last.ok()) {
      if (attempts != nullptr) *attempts = made;
      return response;
    }
    if (!IsOutcomeUnknown(last.code())) break;
  }
  if (attempts != nullptr) *attempts = made;
  return last;
}

}  // namespace fencegate::client
