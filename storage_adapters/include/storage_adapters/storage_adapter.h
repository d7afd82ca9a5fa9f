// Copyright fencegate authors.
//
// StorageAdapter: applies the operations of an accepted write to one kind of
// storage (files, PostgreSQL, ...). The gateway calls Validate() before it
// touches the fence, and Apply() only after the fencing check passed and any
// fence advance is durable, under the domain's lock.

#ifndef STORAGE_ADAPTERS_STORAGE_ADAPTER_H_
#define STORAGE_ADAPTERS_STORAGE_ADAPTER_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>

#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "fencegate/v1/gateway.pb.h"
#include "google/protobuf/repeated_ptr_field.h"

namespace fencegate {

using Operations = google::protobuf::RepeatedPtrField<v1::Operation>;
using OpResults = google::protobuf::RepeatedPtrField<v1::OpResult>;

// What an accepted write is about.
struct WriteTarget {
  // The fencing domain (already defaulted from the resource if empty).
  absl::string_view domain;
  // The request's token, already checked against the domain's fence.
  uint64_t token = 0;
  // The resource with its route prefix removed, e.g. "reports/daily.csv".
  absl::string_view path;
  // The client's request id, possibly empty; for log lines.
  absl::string_view request_id;
  // The client's deadline: work still running after it is cancelled where
  // the storage allows (the PostgreSQL adapter does). Default: none.
  absl::Time deadline = absl::InfiniteFuture();
  // The request's seq within its token; 0: none. Only for adapters whose
  // KeepsSeq() is true.
  uint64_t seq = 0;
  // The request's resource as sent, "<route>/<path>", for error details;
  // may be empty (then `path` is named).
  absl::string_view resource = {};
  // Where an adapter that keeps (token, seq) says that the write was a
  // retry of the storage's last applied one, answered without applying it
  // again (results then stay empty). May be null (then not said).
  bool* replayed = nullptr;
  // Asked before an adapter keeps `bytes` of results for the reply (rows a
  // statement returned): true if they fit in the gateway's memory budget,
  // which then holds them until the reply; false if they do not (the
  // adapter then keeps no more and says the results were truncated). Null:
  // no budget. Called from the adapter's threads, never concurrently for
  // one write; never blocks.
  std::function<bool(size_t bytes)>* take_result_memory = nullptr;
  // Who sent the write: its mTLS identity, else its peer's address; empty
  // if unknown. An adapter that shares connections between writes gives
  // each caller a share of them (PostgreSQL's max_connections_per_caller).
  absl::string_view caller = {};
};

// 16 random hex digits, made once per process: names this gateway's
// presence in shared storage (StorageAdapter::OtherGateways).
const std::string& GatewayInstanceId();

// Thread safety: implementations are safe for concurrent use. Calls for one
// fencing domain never overlap (the gateway serializes them); calls for
// different domains may run at the same time, even on the same path.
class StorageAdapter {
 public:
  StorageAdapter() = default;
  StorageAdapter(const StorageAdapter&) = delete;
  StorageAdapter& operator=(const StorageAdapter&) = delete;
  virtual ~StorageAdapter() = default;

  // Checks that the target (its path, and its token where the storage
  // limits tokens) and `ops` are well formed for this adapter, without side
  // effects and without blocking. INVALID_ARGUMENT names the offending field
  // ("ops[2]") and the reason. `ops` is non-empty.
  virtual absl::Status Validate(const WriteTarget& target,
                                const Operations& ops) const = 0;

  // Applies `ops` in order, appending one result per operation to
  // `results`. May block (disk, network): called on an I/O thread. Returns
  // OK only once every operation is durable in the storage. Errors:
  // INVALID_ARGUMENT for requests the storage refuses, PERMISSION_DENIED for
  // a path outside the adapter's root, UNAVAILABLE when the storage is
  // unreachable, others as documented by each adapter. No exception escapes.
  virtual absl::Status Apply(const WriteTarget& target, const Operations& ops,
                             OpResults* results) = 0;

  // Receives what Apply() would have returned.
  using ApplyCallback = absl::AnyInvocable<void(absl::Status) &&>;

  // Apply() without holding the calling thread while the storage works:
  // starts the write and may return before it is applied; `done` runs
  // exactly once with the outcome, on this thread or on one of the
  // adapter's. `target` (and the strings it views), `ops` and `results`
  // must stay valid until `done` runs. Adapters that wait for storage
  // without a thread of their own (the PostgreSQL adapter sends queued
  // writes from the thread already talking to the database) override it;
  // the default runs Apply() on this thread.
  virtual void ApplyAsync(const WriteTarget& target, const Operations& ops,
                          OpResults* results, ApplyCallback done) {
    std::move(done)(Apply(target, ops, results));
  }

  // Checks, once before the gateway serves, what the adapter can check of
  // its storage: FAILED_PRECONDITION for a configuration it refuses (the
  // gateway then does not start). Storage that cannot be reached yet is not
  // an error: the returned text says so. Returns a line for the log (empty:
  // nothing to say). May block. The default checks nothing.
  virtual absl::StatusOr<std::string> CheckAtStartup() { return std::string(); }

  // Checks a named statement of the route's configuration, once at start-up
  // and before any Write, and keeps what the adapter needs to know of it;
  // Writes then name it in SqlStatement.statement (the router puts its SQL
  // in SqlStatement.sql and keeps the name). `session_safe`: the operator
  // vouches that it leaves nothing behind in a pooled session.
  // INVALID_ARGUMENT if the adapter would never run it. The default checks
  // it as Validate() would a Write holding it.
  virtual absl::Status AddNamedStatement(const std::string& name,
                                         const std::string& sql,
                                         bool session_safe);

  // Whether the storage can be reached now, for the route's health
  // (route/<name> in the gRPC health service): UNAVAILABLE saying why if
  // not. Called every few seconds from the gateway's health thread only;
  // may block for up to a few seconds. The default: always reachable.
  virtual absl::Status Probe() { return absl::OkStatus(); }

  // Called once when the gateway's shutdown grace has passed: stop what is
  // still running (cancel statements in flight) and fail what has not
  // started, so that every pending callback runs soon. Writes applied
  // after it fail UNAVAILABLE. Thread-safe; may block briefly. The default
  // does nothing (its writes end by themselves).
  virtual void CancelInFlight() {}

  // Whether the adapter reads WriteTarget::caller (it shares connections
  // between callers); the gateway sets it only then. The default: false.
  virtual bool UsesCaller() const { return false; }

  // How many other gateways share this storage's fences now: the adapter
  // keeps a presence in the storage that only a live gateway holds (it goes
  // with the process, even after kill -9), named by GatewayInstanceId(), and
  // counts the others' (several routes of one gateway on one storage are one
  // gateway). A paused gateway still counts. Called every few seconds from
  // the gateway's fleet thread only; may block as long as connecting to the
  // storage may.
  // UNAVAILABLE if the storage cannot tell. The default (storage no other
  // gateway shares): UNIMPLEMENTED.
  virtual absl::StatusOr<int> OtherGateways() {
    return absl::UnimplementedError("the storage is not shared");
  }

  // The fence the storage keeps itself (docs/fencing.md, "The fence in the
  // storage"): true if it keeps one per domain, which the three calls
  // below reach. The default: false, and they return UNIMPLEMENTED.
  virtual bool KeepsFences() const { return false; }

  // Raises the storage's fence of `domain` to `token`, or keeps it if
  // equal, once the storage's writes of lower tokens have ended; OK once
  // durable. The stale-token error (common/stale_token.h) with the
  // storage's token if it holds a higher one; UNAVAILABLE if it cannot be
  // reached; INVALID_ARGUMENT for a token the storage cannot hold. May
  // block.
  virtual absl::Status RaiseFence(absl::string_view domain, uint64_t token);

  // The highest token the storage's fence can hold (2^63-1 for PostgreSQL's
  // bigint). RaiseFence() refuses a higher one. Never blocks. The default:
  // 2^64-1.
  virtual uint64_t MaxFenceToken() const {
    return std::numeric_limits<uint64_t>::max();
  }

  // Raises the storage's fence of `domain` to the higher of its token + 1
  // and `at_least`, as one atomic step of the storage, and returns it: no
  // other caller, in any process, receives the same token. OUT_OF_RANGE
  // past the highest token it can hold; UNAVAILABLE as RaiseFence(). May
  // block.
  virtual absl::StatusOr<uint64_t> NextFence(absl::string_view domain,
                                             uint64_t at_least);

  // Calls `fn` with every domain the storage holds a fence for, and its
  // token. UNAVAILABLE if it cannot be reached, DATA_LOSS for a record it
  // cannot read. May block.
  virtual absl::Status ReadFences(
      absl::FunctionRef<void(absl::string_view domain, uint64_t token)> fn);

  // The storage's fence of `domain`: 0 if it holds none. Errors as
  // ReadFences(). May block. The default reads every fence and keeps one.
  virtual absl::StatusOr<uint64_t> ReadFence(absl::string_view domain);

  // True if the storage records each domain's last applied (token, seq)
  // together with the write (docs/fencing.md, rule 14): a write with a seq
  // equal to the last one of its token is not applied again (`replayed`
  // is set and Apply returns OK), one below it fails with
  // SeqOutOfOrderError (common/seq_out_of_order.h), applying nothing. The
  // gateway refuses a seq on routes whose adapter returns false (the
  // default).
  virtual bool KeepsSeq() const { return false; }

  // True if the adapter keeps a version per path and checks an operation's
  // if_absent and if_version (docs/fencing.md, rule 15), failing one that
  // does not hold with PreconditionFailedError
  // (common/precondition_failed.h). The gateway refuses them on routes
  // whose adapter returns false (the default).
  virtual bool KeepsVersions() const { return false; }

  // True if ApplyAsync() never blocks the calling thread (it queues the
  // write, or does only in-memory work), so that the gateway may call it
  // from gRPC's threads. The default ApplyAsync() runs Apply(), so false.
  virtual bool ApplyAsyncNeverBlocks() const { return false; }
};

}  // namespace fencegate

#endif  // STORAGE_ADAPTERS_STORAGE_ADAPTER_H_
