// Copyright fencegate authors.

#include "gateway/gateway_service.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "fencegate/common/grpc_status.h"
#include "fencegate/common/limits.h"
#include "fencegate/common/precondition_failed.h"
#include "fencegate/common/seq_out_of_order.h"
#include "fencegate/common/stale_token.h"
#include "fencegate/common/token_refused.h"
#include "gateway/write_request.h"
#include "observability/log.h"
#include "observability/trace_context.h"
#include "postgres/sql_parse.h"
#include "security/peer_identity.h"

namespace fencegate {
namespace {

void ToProto(const FenceState& state, v1::FenceState* out) {
  out->set_domain(state.domain);
  out->set_highest_token(state.highest_token);
  if (state.advanced_at != absl::InfinitePast()) {
    const int64_t micros = absl::ToUnixMicros(state.advanced_at);
    out->mutable_advanced_at()->set_seconds(micros / 1000000);
    out->mutable_advanced_at()->set_nanos(
        static_cast<int32_t>(micros % 1000000) * 1000);
  } else {
    out->clear_advanced_at();
  }
}

template <typename Call>
void FinishNow(Call* call, const absl::Status& status) {
  call->Finish(ToGrpcStatus(status));
}

// Charges `bytes` of a Write's kept results to `memory`: from what is left
// of the last chunk, else a new chunk of at least 64 KiB (exactly `bytes`
// if a whole chunk does not fit). False if even that does not fit.
bool TakeResultMemory(MemoryBudget& memory, size_t bytes,
                      std::vector<MemoryBudget::Reservation>* chunks,
                      size_t* left) {
  if (bytes <= *left) {
    *left -= bytes;
    return true;
  }
  constexpr size_t kChunk = size_t{64} << 10;
  for (const size_t size : {std::max(bytes, kChunk), bytes}) {
    absl::StatusOr<MemoryBudget::Reservation> reserved = memory.Reserve(size);
    if (reserved.ok()) {
      chunks->push_back(*std::move(reserved));
      *left = size - bytes;
      return true;
    }
  }
  return false;
}

// "Write request_id=... trace_id=...", without the parts the call lacks.
std::string RequestTag(absl::string_view rpc, const LogFields& fields) {
  std::string tag(rpc);
  if (!fields.request_id.empty()) {
    absl::StrAppend(&tag, " request_id=", absl::CHexEscape(fields.request_id));
  }
  if (!fields.trace_id.empty()) {
    absl::StrAppend(&tag, " trace_id=", fields.trace_id);
  }
  return tag;
}

// Logs the outcome of a fenced call: stale rejections as warnings with the
// domain, the token and the highest token; advances, failed preconditions
// and out-of-order seqs as info; other errors.
void LogOutcome(absl::string_view rpc, const LogFields& fields,
                absl::string_view domain, uint64_t token,
                const absl::StatusOr<FenceDecision>& decision,
                bool log_accepted) {
  const std::string tag = RequestTag(rpc, fields);
  if (!decision.ok()) {
    // A refused token is logged with the caller's identity by the request's
    // Admission (request_gate.h).
    if (GetTokenRefused(decision.status()).has_value()) return;
    if (std::optional<StaleTokenInfo> stale =
            GetStaleToken(decision.status())) {
      Log(LogSeverity::kWarning,
          absl::StrFormat("%s rejected stale token domain=\"%s\" token=%d "
                          "highest=%d",
                          tag, absl::CHexEscape(domain), token,
                          stale->highest_token),
          fields);
    } else if (GetPreconditionFailed(decision.status()).has_value() ||
               GetSeqOutOfOrder(decision.status()).has_value()) {
      // Refused by the storage's state, as the client asked: not an error.
      Log(LogSeverity::kInfo,
          absl::StrFormat("%s conflict domain=\"%s\" token=%d: %s", tag,
                          absl::CHexEscape(domain), token,
                          decision.status().message()),
          fields);
    } else {
      Log(LogSeverity::kError,
          absl::StrFormat("%s failed domain=\"%s\" token=%d: %s", tag,
                          absl::CHexEscape(domain), token,
                          decision.status().ToString()),
          fields);
    }
    return;
  }
  if (decision->advanced || log_accepted) {
    Log(LogSeverity::kInfo,
        absl::StrFormat("%s accepted domain=\"%s\" token=%d%s", tag,
                        absl::CHexEscape(domain), token,
                        decision->advanced ? " (fence advanced)" : ""),
        fields);
  }
}

}  // namespace

// A Write from validation to its reply.
struct GatewayService::PendingWrite {
  // The call, which owns the request's and the response's bytes.
  WriteCall* call = nullptr;
  grpc::ServerContext* context = nullptr;
  // Parsed from the request's bytes; the response is serialized into
  // response_bytes (the call's) before the reply.
  v1::WriteRequest parsed_request;
  v1::WriteResponse built_response;
  const v1::WriteRequest* request = &parsed_request;
  v1::WriteResponse* response = &built_response;
  grpc::ByteBuffer* response_bytes = nullptr;
  std::string domain;
  // Who sent it (CallerOf), for the adapters' shares.
  std::string caller;
  WriteTarget target;  // Views `domain`, `caller` and the request.
  // Set by the adapter when the write's (token, seq) was already applied.
  bool replayed = false;
  // Its adapter was asked to apply it: a stale token then came from the
  // storage, not from this gateway's fence.
  bool applied = false;
  StorageAdapter* adapter = nullptr;
  // What the gate admitted; views the request.
  std::unique_ptr<Admission> admission;
  // For the metrics: when it arrived, and its route (a view into the
  // request) once resolved.
  absl::Time started;
  absl::string_view route;
  // The trace id of its traceparent, if any.
  std::string trace_id;
  // Its share of the memory budget, released with it: its bytes and its
  // parsed request (HeldBytesOf).
  MemoryBudget::Reservation memory;
  // The rows an adapter keeps for the reply, charged as it keeps them
  // (WriteTarget::take_result_memory), in chunks; what is left of the last.
  std::vector<MemoryBudget::Reservation> result_memory;
  size_t result_memory_left = 0;
  std::function<bool(size_t)> take_result_memory;

  LogFields fields() const { return {request->request_id(), trace_id}; }
};

void GatewayService::Refuse(const PendingWrite& write, WriteCall* call,
                            const absl::Status& status) {
  Count(write, status);
  FinishNow(call, status);
}

void GatewayService::Count(const PendingWrite& write,
                           const absl::Status& status) const {
  if (options_.metrics != nullptr) {
    options_.metrics->RecordWrite(write.route, status,
                                  absl::Now() - write.started);
  }
}

GatewayService::GatewayService(Fencer* fencer, const Router* router,
                               IoPool* pool, IoPool* raise_pool,
                               const RequestGate* gate,
                               GatewayServiceOptions options)
    : fencer_(fencer),
      router_(router),
      pool_(pool),
      raise_pool_(raise_pool),
      gate_(gate),
      options_(options),
      write_(WriteCall::Of(&grpc_service_, &GrpcService::RequestWrite,
                           [this](WriteCall* call) { Write(call); })),
      fence_(FenceCall::Of(&grpc_service_, &GrpcService::RequestFence,
                           [this](FenceCall* call) { Fence(call); })),
      get_fence_(
          GetFenceCall::Of(&grpc_service_, &GrpcService::RequestGetFence,
                           [this](GetFenceCall* call) { GetFence(call); })),
      sequence_(
          SequenceCall::Of(&grpc_service_, &GrpcService::RequestSequence,
                           [this](SequenceCall* call) { Sequence(call); })) {}

void GatewayService::Listen(Queue queue) const {
  WriteCall::Listen(&write_, queue);
  FenceCall::Listen(&fence_, queue);
  GetFenceCall::Listen(&get_fence_, queue);
  SequenceCall::Listen(&sequence_, queue);
}

void GatewayService::Write(WriteCall* call) {
  grpc::ServerContext* context = call->context();
  const grpc::ByteBuffer* request_bytes = &call->request();
  auto write = std::make_unique<PendingWrite>();
  // Read for the duration metric only.
  if (options_.metrics != nullptr) write->started = absl::Now();
  write->trace_id = TraceIdOf(*context);
  // Counted on the wire, then charged what it will hold (its bytes and
  // its parsed request) before it is parsed.
  absl::StatusOr<WriteShape> shape =
      ShapeOfWriteRequest(*request_bytes, options_.max_ops_per_write);
  if (!shape.ok()) return Refuse(*write, call, shape.status());
  if (options_.memory != nullptr) {
    absl::StatusOr<MemoryBudget::Reservation> reserved =
        options_.memory->Reserve(HeldBytesOf(request_bytes->Length(), *shape));
    if (!reserved.ok()) return Refuse(*write, call, reserved.status());
    write->memory = *std::move(reserved);
  }
  if (absl::Status s =
          DecodeWriteRequest(*request_bytes, &write->parsed_request);
      !s.ok()) {
    return Refuse(*write, call, s);
  }
  absl::StatusOr<std::unique_ptr<Admission>> admitted =
      gate_->Admit(*context, CallFactsOf(write->parsed_request));
  if (!admitted.ok()) return Refuse(*write, call, admitted.status());
  write->admission = *std::move(admitted);
  write->call = call;
  write->context = context;
  write->response_bytes = call->response();
  if (SqlTextBytes(write->parsed_request) > kInlineCheckSqlBytes) {
    // Classifying long SQL text takes a parse of up to a second or two of
    // CPU per MiB: on the long-text parser's thread, one Write after
    // another, so that it holds up no queue thread and no other call. The
    // RPC is not finished until Dispatch replies, so the server (and this
    // service) outlive it.
    postgres::RunOnLongTextParser([this, w = write.release()]() mutable {
      Dispatch(std::unique_ptr<PendingWrite>(w));
    });
    return;
  }
  Dispatch(std::move(write));
}

void GatewayService::Dispatch(std::unique_ptr<PendingWrite> write) {
  const v1::WriteRequest* request = write->request;
  CheckedWrite checked;
  const absl::Status check =
      CheckWrite(*router_, &write->parsed_request, &checked);
  write->route = checked.resolved.route;
  if (!check.ok()) {
    Count(*write, check);
    write->call->Finish(ToGrpcStatus(check));
    return;
  }
  const ResolvedResource& resolved = checked.resolved;
  write->domain = std::move(checked.domain);
  write->target = WriteTarget{write->domain, request->token(), resolved.path,
                              request->request_id(),
                              absl::FromChrono(write->context->deadline())};
  write->target.seq = request->seq();
  write->target.resource = request->resource();
  write->target.replayed = &write->replayed;
  if (resolved.adapter->UsesCaller()) {
    write->caller = CallerOf(*write->context, write->admission->identity());
    write->target.caller = write->caller;
  }
  if (options_.memory != nullptr) {
    write->take_result_memory = [w = write.get(),
                                 memory = options_.memory](size_t bytes) {
      return TakeResultMemory(*memory, bytes, &w->result_memory,
                              &w->result_memory_left);
    };
    write->target.take_result_memory = &write->take_result_memory;
  }
  write->adapter = resolved.adapter;
  Submit(std::move(write));
}

Fencer::AsyncApply GatewayService::ApplyOf(PendingWrite* w) {
  return [w](Fencer::Applied applied) {
    w->applied = true;
    w->adapter->ApplyAsync(w->target, w->request->ops(),
                           w->response->mutable_results(), std::move(applied));
  };
}

void GatewayService::Submit(std::unique_ptr<PendingWrite> write) {
  PendingWrite* w = write.get();
  ExecuteAsyncOptions options;
  options.check = w->admission->advance_check();
  // A write to an adapter that only queues or computes, whose domain is
  // idle and whose fence is in memory, needs nothing that can block: an
  // equal or stale token is decided on this thread, an advance is queued to
  // the fence store's commit thread, which applies the write once the
  // advance is durable. No hand-off to the I/O pool.
  options.apply_never_blocks = w->adapter->ApplyAsyncNeverBlocks();
  // The client may give up (deadline, cancel, shutdown) while the write
  // waits for its domain: then it is not applied, for nobody would hear of
  // it.
  options.cancelled = [w] {
    if (!w->context->IsCancelled()) return false;
    Log(LogSeverity::kWarning,
        absl::StrFormat("%s cancelled before it was applied (the client "
                        "cancelled, or its deadline passed) domain=\"%s\" "
                        "token=%d: nothing was written",
                        RequestTag("Write", w->fields()),
                        absl::CHexEscape(w->domain), w->request->token()),
        w->fields());
    return true;
  };
  const std::string& domain = w->domain;  // Moves with the write.
  fencer_->Submit(
      domain, w->request->token(), ApplyOf(w),
      [this, write = std::move(write)](
          absl::StatusOr<FenceDecision> decision) mutable {
        Reply(std::move(write), std::move(decision));
      },
      std::move(options));
}

void GatewayService::Reply(std::unique_ptr<PendingWrite> write,
                           absl::StatusOr<FenceDecision> decision) {
  LogOutcome("Write", write->fields(), write->domain, write->request->token(),
             decision, options_.log_writes);
  write->admission->Audit(decision);
  if (std::optional<StaleTokenInfo> stale_info =
          decision.ok() ? std::nullopt : GetStaleToken(decision.status());
      stale_info.has_value()) {
    // The storage's fence may have found the token stale after this
    // gateway's own fence rose to it: the client hears of the stale token
    // only, and this gateway's fence learns what the storage holds
    // (Fencer::LearnFromStorage: read by the gateway, never the token the
    // error carried; in the domain's turn, taking no I/O pool thread while it
    // waits). A stale token this gateway refused itself (never applied)
    // learns nothing.
    absl::Status stale = decision.status();
    Fencer::ForgetAdvance(stale);
    decision = std::move(stale);
    if (write->applied) {
      fencer_->LearnFromStorage(
          write->domain, [domain = write->domain](absl::Status s) {
            if (!s.ok()) {
              Log(LogSeverity::kWarning,
                  absl::StrFormat("domain \"%s\": could not learn the "
                                  "storage's fence: %s",
                                  absl::CHexEscape(domain), s.ToString()));
            }
          });
    }
  }
  if (decision.ok()) {
    ToProto(decision->fence, write->response->mutable_fence());
    write->response->set_fence_advanced(decision->advanced);
    if (write->replayed) write->response->set_replayed(true);
    if (absl::Status s =
            SerializeWriteResponse(*write->response, write->response_bytes);
        !s.ok()) {
      decision = s;
    }
  }
  Count(*write, decision.status());
  WriteCall* call = write->call;
  // Free the write before finishing: once the RPC is finished the server
  // may shut down, while this may run on an adapter's thread that nothing
  // waits for.
  write.reset();
  call->Finish(ToGrpcStatus(decision.status()));
}

void GatewayService::Fence(FenceCall* call) {
  const v1::FenceRequest* request = &call->request();
  RaiseInTurn(
      call, CallFactsOf(*request), /*has_token=*/true,
      [this, request](const Fencer::Turn& turn, const AdvanceCheck* check) {
        return fencer_->Fence(turn, request->token(), check);
      });
}

template <typename Call>
void GatewayService::RaiseInTurn(Call* call, const CallFacts& facts,
                                 bool has_token, RaiseFn raise) {
  grpc::ServerContext* context = call->context();
  // Fence calls are counted (fencegate_fences_total); Sequence calls not.
  const bool counted =
      options_.metrics != nullptr && absl::EndsWith(facts.method, "/Fence");
  auto refuse = [&](const absl::Status& s) {
    if (counted) options_.metrics->RecordFence(s);
    FinishNow(call, s);
  };
  absl::StatusOr<std::unique_ptr<Admission>> admitted =
      gate_->Admit(*context, facts);
  if (!admitted.ok()) return refuse(admitted.status());
  const std::string domain(facts.domain);
  if (absl::Status s =
          CheckFenceCall(domain, facts.token, has_token, facts.request_id);
      !s.ok()) {
    return refuse(s);
  }
  auto in_turn = [this, call, domain, counted, trace_id = TraceIdOf(*context),
                  method = facts.method, request_id = facts.request_id,
                  token = facts.token, raise = std::move(raise),
                  admission = *std::move(admitted)](Fencer::Turn turn) mutable {
    const absl::string_view rpc = method.substr(method.rfind('/') + 1);
    const LogFields fields{request_id, trace_id};
    if (call->context()->IsCancelled()) {
      const absl::Status cancelled =
          absl::CancelledError("cancelled before the fence was raised");
      Log(LogSeverity::kWarning,
          absl::StrFormat("%s cancelled before it was applied (the client "
                          "cancelled, or its deadline passed) domain=\"%s\": "
                          "the fence did not move",
                          RequestTag(rpc, fields), absl::CHexEscape(domain)),
          fields);
      if (counted) options_.metrics->RecordFence(cancelled);
      turn.Release();
      call->Finish(ToGrpcStatus(cancelled));
      return;
    }
    absl::StatusOr<FenceDecision> decision =
        std::move(raise)(turn, admission->advance_check());
    turn.Release();
    LogOutcome(rpc, fields, domain,
               decision.ok() ? decision->fence.highest_token : token, decision,
               options_.log_writes);
    admission->Audit(decision);
    if (counted) options_.metrics->RecordFence(decision.status());
    if (decision.ok()) ToProto(decision->fence, call->response());
    call->Finish(ToGrpcStatus(decision.status()));
  };
  // The turn came on the I/O pool; the raise, which may wait for the
  // domain's holders, runs on a thread of the raises' own.
  fencer_->RunInTurn(domain, [pool = raise_pool_, in_turn = std::move(in_turn)](
                                 Fencer::Turn turn) mutable {
    pool->Post(
        [in_turn = std::move(in_turn), turn = std::move(turn)]() mutable {
          std::move(in_turn)(std::move(turn));
        });
  });
}

void GatewayService::GetFence(GetFenceCall* call) {
  const v1::GetFenceRequest* request = &call->request();
  if (absl::StatusOr<std::unique_ptr<Admission>> admitted =
          gate_->Admit(*call->context(), CallFactsOf(*request));
      !admitted.ok()) {
    return FinishNow(call, admitted.status());
  }
  if (absl::Status s = ValidateDomain(request->domain()); !s.ok()) {
    return FinishNow(call, s);
  }
  pool_->Post([this, call, request]() {
    absl::StatusOr<FenceState> state = fencer_->Get(request->domain());
    if (state.ok()) ToProto(*state, call->response());
    call->Finish(ToGrpcStatus(state.status()));
  });
}

void GatewayService::Sequence(SequenceCall* call) {
  RaiseInTurn(call, CallFactsOf(call->request()), /*has_token=*/false,
              [this](const Fencer::Turn& turn, const AdvanceCheck* check) {
                return fencer_->Sequence(turn, check);
              });
}

}  // namespace fencegate
