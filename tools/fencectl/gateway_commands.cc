// Copyright fencegate authors.

#include "tools/fencectl/gateway_commands.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fencegate/client/write_retry.h"
#include "fencegate/common/grpc_status.h"
#include "fencegate/common/precondition_failed.h"
#include "fencegate/common/seq_out_of_order.h"
#include "fencegate/common/stale_token.h"
#include "fencegate/common/token_refused.h"
#include "fencegate/v1/gateway.grpc.pb.h"
#include "google/protobuf/util/json_util.h"
#include "tools/fencectl/exit_codes.h"

namespace fencegate::fencectl {
namespace {

// Parses TYPE:VALUE into a SqlValue; false with *error set if malformed.
bool ParseParam(const std::string& spec, v1::SqlValue* out,
                std::string* error) {
  const size_t colon = spec.find(':');
  const std::string type = spec.substr(0, colon);
  const std::string value =
      colon == std::string::npos ? "" : spec.substr(colon + 1);
  // Every type but null needs ":VALUE".
  bool ok = type == "null" || colon != std::string::npos;
  if (!ok) {
    // Reported below.
  } else if (type == "null") {
    out->set_null(true);
  } else if (type == "text") {
    out->set_text(value);
  } else if (type == "int64") {
    int64_t v;
    ok = absl::SimpleAtoi(value, &v);
    out->set_int64(v);
  } else if (type == "float64") {
    double v;
    ok = absl::SimpleAtod(value, &v);
    out->set_float64(v);
  } else if (type == "bool") {
    ok = value == "true" || value == "false";
    out->set_boolean(value == "true");
  } else if (type == "bytes") {
    ok = value.size() % 2 == 0 &&
         std::all_of(value.begin(), value.end(), absl::ascii_isxdigit);
    out->set_bytes(absl::HexStringToBytes(value));
  } else {
    ok = false;
  }
  if (!ok) {
    *error = absl::StrCat("--param=", spec,
                          ": expected TYPE:VALUE with TYPE text, int64, "
                          "float64, bool, bytes (hex) or null");
  }
  return ok;
}

// A file's bytes, or stdin's for "-".
std::optional<std::string> ReadInput(const std::string& path,
                                     std::string* error) {
  std::ostringstream data;
  if (path == "-") {
    data << std::cin.rdbuf();
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      *error = absl::StrCat("cannot read \"", path, "\"");
      return std::nullopt;
    }
    data << in.rdbuf();
  }
  return data.str();
}

int ReportError(const absl::Status& status) {
  if (std::optional<StaleTokenInfo> stale = GetStaleToken(status)) {
    std::cerr << "fencectl: rejected: stale token " << stale->token
              << " for domain \"" << stale->domain
              << "\"; its highest token is " << stale->highest_token << "\n";
    return kExitStale;
  }
  if (std::optional<SeqOutOfOrderInfo> order = GetSeqOutOfOrder(status)) {
    std::cerr << "fencectl: rejected: seq " << order->seq << " of token "
              << order->token << " for domain \"" << order->domain
              << "\" is out of order; seq " << order->last_seq
              << " was applied after it\n";
    return kExitSeqOutOfOrder;
  }
  if (std::optional<PreconditionFailedInfo> failed =
          GetPreconditionFailed(status)) {
    std::cerr << "fencectl: rejected: precondition "
              << (failed->expected_absent
                      ? std::string("if-absent")
                      : absl::StrCat("if-version=", failed->expected_version))
              << " failed: " << failed->resource << " "
              << (failed->exists ? "exists" : "does not exist") << ", version "
              << failed->version << "; nothing applied\n";
    return kExitPreconditionFailed;
  }
  std::cerr << "fencectl: " << absl::StatusCodeToString(status.code()) << ": "
            << status.message() << "\n";
  if (GetTokenRefused(status).has_value()) return kExitTokenRefused;
  switch (status.code()) {
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
      return kExitDenied;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return kExitInvalid;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return kExitUnavailable;
    default:
      return kExitError;
  }
}

int ReportError(const grpc::Status& status) {
  return ReportError(FromGrpcStatus(status));
}

void Print(const google::protobuf::Message& message, bool json,
           const std::string& text) {
  if (json) {
    std::string out;
    google::protobuf::util::JsonPrintOptions options;
    options.always_print_primitive_fields = true;
    options.preserve_proto_field_names = true;
    if (google::protobuf::util::MessageToJsonString(message, &out, options)
            .ok()) {
      std::cout << out << "\n";
      return;
    }
  }
  std::cout << text << "\n";
}

std::string Describe(const v1::FenceState& state) {
  return absl::StrCat("domain=", state.domain(),
                      " highest_token=", state.highest_token());
}

// A context whose deadline is the call's timeout from now.
std::unique_ptr<grpc::ClientContext> ContextOf(const GatewayCall& call) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() +
                        absl::ToChronoSeconds(call.timeout));
  return context;
}

// Fills the write's one operation; a usage error's message otherwise.
std::optional<std::string> BuildOperation(const WriteCommand& write,
                                          v1::Operation* op) {
  std::string error;
  if (write.put.has_value()) {
    op->mutable_put()->set_data(*write.put);
  } else if (write.append.has_value()) {
    op->mutable_append()->set_data(*write.append);
  } else if (write.del) {
    op->mutable_delete_();
  } else if (write.sql.has_value() || write.statement.has_value()) {
    if (write.sql.has_value()) {
      op->mutable_sql()->set_sql(*write.sql);
    } else {
      op->mutable_sql()->set_statement(*write.statement);
    }
    for (const std::string& spec : write.params) {
      if (!ParseParam(spec, op->mutable_sql()->add_params(), &error)) {
        return error;
      }
    }
  } else {
    const bool is_put = write.put_file.has_value();
    std::optional<std::string> data =
        ReadInput(is_put ? *write.put_file : *write.append_file, &error);
    if (!data) return error;
    if (is_put) {
      op->mutable_put()->set_data(*std::move(data));
    } else {
      op->mutable_append()->set_data(*std::move(data));
    }
  }
  return std::nullopt;
}

}  // namespace

int RunWrite(const GatewayCall& call, const WriteCommand& write) {
  v1::WriteRequest request;
  request.set_domain(write.domain);
  request.set_token(write.token);
  request.set_resource(write.resource);
  request.set_request_id(call.request_id);
  if (std::optional<std::string> error =
          BuildOperation(write, request.add_ops())) {
    return UsageError(*error);
  }
  if (write.if_absent) request.mutable_ops(0)->set_if_absent(true);
  if (write.if_version.has_value()) {
    request.mutable_ops(0)->set_if_version(*write.if_version);
  }
  request.set_seq(write.seq);
  auto stub = v1::Gateway::NewStub(call.channel);
  client::WriteRetryOptions retry;
  retry.max_attempts = write.attempts;
  retry.attempt_timeout = call.timeout;
  int attempts = 0;
  absl::StatusOr<v1::WriteResponse> written =
      client::WriteWithRetry(*stub, request, retry, &attempts);
  if (attempts > 1) {
    std::cerr << "fencectl: " << attempts << " attempts with seq " << write.seq
              << "\n";
  }
  if (!written.ok()) return ReportError(written.status());
  const v1::WriteResponse& response = *written;
  std::string text =
      absl::StrCat("ok: ", Describe(response.fence()),
                   response.fence_advanced() ? " (advanced)" : "",
                   response.replayed() ? " (replayed: applied already)" : "");
  if (response.results_size() > 0 && response.results(0).has_file()) {
    const v1::FileResult& r = response.results(0).file();
    absl::StrAppend(&text, " size=", r.size(), " written=", r.bytes_written(),
                    " version=", r.version());
  } else if (response.results_size() > 0 && response.results(0).has_sql()) {
    const v1::SqlResult& r = response.results(0).sql();
    absl::StrAppend(&text, " rows_affected=", r.rows_affected());
    for (const v1::SqlRow& row : r.rows()) {
      std::vector<std::string> fields;
      for (const v1::SqlValue& v : row.fields()) {
        fields.push_back(v.has_null() ? "NULL" : v.text());
      }
      absl::StrAppend(&text, "\n", absl::StrJoin(fields, "\t"));
    }
  }
  Print(response, call.json, text);
  return kExitOk;
}

int RunFence(const GatewayCall& call, const std::string& domain,
             uint64_t token) {
  v1::FenceRequest request;
  request.set_domain(domain);
  request.set_token(token);
  request.set_request_id(call.request_id);
  v1::FenceState response;
  auto stub = v1::Gateway::NewStub(call.channel);
  grpc::Status status = stub->Fence(ContextOf(call).get(), request, &response);
  if (!status.ok()) return ReportError(status);
  Print(response, call.json, absl::StrCat("ok: ", Describe(response)));
  return kExitOk;
}

int RunGet(const GatewayCall& call, const std::string& domain) {
  v1::GetFenceRequest request;
  request.set_domain(domain);
  v1::FenceState response;
  auto stub = v1::Gateway::NewStub(call.channel);
  grpc::Status status =
      stub->GetFence(ContextOf(call).get(), request, &response);
  if (!status.ok()) return ReportError(status);
  Print(response, call.json, Describe(response));
  return kExitOk;
}

int RunSequence(const GatewayCall& call, const std::string& domain) {
  v1::SequenceRequest request;
  request.set_domain(domain);
  request.set_request_id(call.request_id);
  v1::FenceState response;
  auto stub = v1::Gateway::NewStub(call.channel);
  grpc::Status status =
      stub->Sequence(ContextOf(call).get(), request, &response);
  if (!status.ok()) return ReportError(status);
  Print(response, call.json, absl::StrCat(response.highest_token()));
  return kExitOk;
}

}  // namespace fencegate::fencectl
