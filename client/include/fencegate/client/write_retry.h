// Copyright fencegate authors.
//
// WriteWithRetry: a Gateway.Write that survives a lost reply.
//
//   v1::WriteRequest w;  // domain, token, resource, ops ...
//   w.set_seq(lock.seq.Next());
//   absl::StatusOr<v1::WriteResponse> r = WriteWithRetry(*stub, w, {});
//
// A Write whose reply was lost (UNAVAILABLE: the gateway or its storage
// went away mid-write; DEADLINE_EXCEEDED) may or may not have been applied.
// With a seq, sending the same (token, seq) again is always safe: the
// storage applies it at most once and answers a repeat with
// `replayed = true` (docs/fencing.md, rule 14). So, for a request with a
// seq, this retries those two codes with the same request, waiting between
// attempts (doubling from initial_backoff up to max_backoff, with jitter),
// until max_attempts attempts were made. A request without a seq is sent
// once: repeating it could apply it twice. Every other outcome (OK, a
// stale token, SeqOutOfOrder, PreconditionFailed, a SQL error, ...)
// returns at once, with the gateway's details as payloads
// (common/grpc_status.h). A file operation with if_absent or if_version is
// retried safely only with a seq: a repeat of an applied (token, seq) is
// answered before its precondition is checked (rule 15), while without a
// seq a retry of a write that landed fails its own precondition.
//
// A retry refused as stale (a new holder fenced meanwhile) or as out of
// order says only that the retry was not applied: the attempt before it,
// whose outcome was unknown, may have been, and if so before the new
// holder's token (docs/fencing.md, rule 4) or the later seq. The storage
// keeps the last (token, seq) of the domain's current token only, so it
// cannot answer such a retry as replayed.
//
// Thread safety: safe to call concurrently with one stub.

#ifndef CLIENT_WRITE_RETRY_H_
#define CLIENT_WRITE_RETRY_H_

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fencegate/v1/gateway.grpc.pb.h"

namespace fencegate::client {

struct WriteRetryOptions {
  // Attempts in all, the first included; at least 1.
  int max_attempts = 6;
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(2);
  // Each attempt's deadline.
  absl::Duration attempt_timeout = absl::Seconds(10);
};

// Sends `request` and retries as above. `*attempts` (if not null) receives
// the number of attempts made.
absl::StatusOr<v1::WriteResponse> WriteWithRetry(
    v1::Gateway::StubInterface& stub, const v1::WriteRequest& request,
    const WriteRetryOptions& options, int* attempts = nullptr);

// True for the codes WriteWithRetry retries (UNAVAILABLE,
// DEADLINE_EXCEEDED).
bool IsOutcomeUnknown(absl::StatusCode code);

}  // namespace fencegate::client

#endif  // CLIENT_WRITE_RETRY_H_
