// Copyright fencegate authors.
//
// fencectl: command-line client of a running fencegate. Exit codes are part
// of its interface, for shell scripts:
//   0 success; 1 other error; 2 usage error; 3 stale token;
//   4 request refused as invalid; 5 gateway or storage unavailable, or
//   deadline exceeded.

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "fencegate/v1/gateway.grpc.pb.h"
#include "fencing/stale_token.h"
#include "gateway/flags.h"
#include "gateway/status.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace fencegate {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitStale = 3;
constexpr int kExitInvalid = 4;
constexpr int kExitUnavailable = 5;

constexpr char kUsage[] =
    "Usage: fencectl [--addr=HOST:PORT] [--timeout=SECONDS] [--json] COMMAND "
    "[flags]\n"
    "\n"
    "Commands:\n"
    "  write --domain=D --token=T --resource=ROUTE/PATH OPERATION\n"
    "        OPERATION is one of --put=DATA, --put-file=PATH, --append=DATA,\n"
    "        --append-file=PATH (PATH '-' reads stdin) or --delete\n"
    "  fence --domain=D --token=T    raise the domain's fence to T\n"
    "  get --domain=D                print the domain's fence\n"
    "\n"
    "The address defaults to $FENCEGATE_ADDR, else 127.0.0.1:7070.\n"
    "Exit codes: 0 ok, 1 error, 2 usage, 3 stale token, 4 invalid request,\n"
    "5 unavailable or deadline exceeded.\n"
    "\n"
    "Flags:\n";

struct Flags {
  std::string addr;
  uint64_t timeout_seconds = 30;
  bool json = false;
  std::string domain;
  std::string token;
  std::string resource;
  std::string request_id;
  std::string put, put_file, append, append_file;
  bool del = false;
  bool help = false;
};

int UsageError(const std::string& message) {
  std::cerr << "fencectl: " << message << " (see fencectl --help)\n";
  return kExitUsage;
}

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

int ReportError(const grpc::Status& grpc_status) {
  absl::Status status = FromGrpcStatus(grpc_status);
  if (std::optional<StaleTokenInfo> stale = GetStaleToken(status)) {
    std::cerr << "fencectl: rejected: stale token " << stale->token
              << " for domain \"" << stale->domain
              << "\"; its highest token is " << stale->highest_token << "\n";
    return kExitStale;
  }
  std::cerr << "fencectl: " << absl::StatusCodeToString(status.code()) << ": "
            << status.message() << "\n";
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kOutOfRange:
      return kExitInvalid;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return kExitUnavailable;
    default:
      return kExitError;
  }
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

int Run(int argc, char** argv) {
  Flags f;
  FlagSet set;
  set.String("addr", &f.addr, "gateway address (default $FENCEGATE_ADDR or "
                              "127.0.0.1:7070)");
  set.Uint("timeout", &f.timeout_seconds, "RPC deadline in seconds (default 30)");
  set.Bool("json", &f.json, "print the response as JSON");
  set.String("domain", &f.domain, "fencing domain (write: default resource)");
  set.String("token", &f.token, "fencing token, 1 to 2^64-1");
  set.String("resource", &f.resource, "write: ROUTE/PATH");
  set.String("request_id", &f.request_id, "write, fence: id for the logs");
  set.String("put", &f.put, "write: replace the file with DATA");
  set.String("put_file", &f.put_file, "write: replace the file with a file");
  set.String("append", &f.append, "write: append DATA");
  set.String("append_file", &f.append_file, "write: append a file's bytes");
  set.Bool("delete", &f.del, "write: delete the file");
  set.Bool("help", &f.help, "print this help");

  std::vector<std::string> args;
  if (absl::Status s = set.Parse(argc, argv, 1, &args); !s.ok()) {
    return UsageError(std::string(s.message()));
  }
  if (f.help) {
    std::cout << kUsage << set.Usage();
    return kExitOk;
  }
  if (args.size() != 1) {
    return UsageError(args.empty() ? "a command is required"
                                   : "exactly one command is expected");
  }
  const std::string& command = args[0];
  if (f.addr.empty()) {
    const char* env = std::getenv("FENCEGATE_ADDR");
    f.addr = env != nullptr && *env != '\0' ? env : "127.0.0.1:7070";
  }
  uint64_t token = 0;
  if (command == "write" || command == "fence") {
    if (!set.WasSet("token")) return UsageError("--token is required");
    if (f.token.empty() || f.token.size() > 20 ||
        !std::all_of(f.token.begin(), f.token.end(), absl::ascii_isdigit) ||
        !absl::SimpleAtoi(f.token, &token) || token == 0) {
      return UsageError(absl::StrCat("--token: \"", f.token,
                                     "\" is not a number from 1 to "
                                     "18446744073709551615"));
    }
  }
  if (f.timeout_seconds == 0 || f.timeout_seconds > 86400) {
    return UsageError("--timeout: must be from 1 to 86400 seconds");
  }
  if ((command == "fence" || command == "get") && !set.WasSet("domain")) {
    return UsageError("--domain is required");
  }

  auto channel =
      grpc::CreateChannel(f.addr, grpc::InsecureChannelCredentials());
  auto stub = v1::Gateway::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(f.timeout_seconds));

  if (command == "write") {
    if (f.resource.empty()) return UsageError("--resource is required");
    int ops = set.WasSet("put") + set.WasSet("put_file") +
              set.WasSet("append") + set.WasSet("append_file") + f.del;
    if (ops != 1) {
      return UsageError(
          "write takes exactly one of --put, --put-file, --append, "
          "--append-file, --delete");
    }
    v1::WriteRequest request;
    request.set_domain(f.domain);
    request.set_token(token);
    request.set_resource(f.resource);
    request.set_request_id(f.request_id);
    v1::Operation* op = request.add_ops();
    std::string error;
    if (set.WasSet("put")) {
      op->mutable_put()->set_data(f.put);
    } else if (set.WasSet("append")) {
      op->mutable_append()->set_data(f.append);
    } else if (f.del) {
      op->mutable_delete_();
    } else {
      bool is_put = set.WasSet("put_file");
      std::optional<std::string> data =
          ReadInput(is_put ? f.put_file : f.append_file, &error);
      if (!data) return UsageError(error);
      if (is_put) {
        op->mutable_put()->set_data(*std::move(data));
      } else {
        op->mutable_append()->set_data(*std::move(data));
      }
    }
    v1::WriteResponse response;
    grpc::Status status = stub->Write(&context, request, &response);
    if (!status.ok()) return ReportError(status);
    const v1::FileResult& r = response.results(0).file();
    Print(response, f.json,
          absl::StrCat("ok: ", Describe(response.fence()),
                       response.fence_advanced() ? " (advanced)" : "",
                       " size=", r.size(), " written=", r.bytes_written()));
    return kExitOk;
  }
  if (command == "fence") {
    v1::FenceRequest request;
    request.set_domain(f.domain);
    request.set_token(token);
    request.set_request_id(f.request_id);
    v1::FenceState response;
    grpc::Status status = stub->Fence(&context, request, &response);
    if (!status.ok()) return ReportError(status);
    Print(response, f.json, absl::StrCat("ok: ", Describe(response)));
    return kExitOk;
  }
  if (command == "get") {
    v1::GetFenceRequest request;
    request.set_domain(f.domain);
    v1::FenceState response;
    grpc::Status status = stub->GetFence(&context, request, &response);
    if (!status.ok()) return ReportError(status);
    Print(response, f.json, Describe(response));
    return kExitOk;
  }
  return UsageError(absl::StrCat("unknown command \"", command, "\""));
}

}  // namespace
}  // namespace fencegate

int main(int argc, char** argv) { return fencegate::Run(argc, argv); }
