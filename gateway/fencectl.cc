// Copyright fencegate authors.
//
// fencectl: command-line client of a running fencegate. Exit codes are part
// of its interface, for shell scripts:
//   0 success; 1 other error; 2 usage error; 3 stale token;
//   4 request refused as invalid; 5 gateway or storage unavailable, or
//   deadline exceeded; 6 lock not acquired or lost; 7 permission denied or
//   not authenticated; 8 token refused (no lock service granted it).

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/tls.h"
#include "common/stale_token.h"
#include "fencegate/v1/gateway.grpc.pb.h"
#include "gateway/fencectl_health.h"
#include "gateway/fencectl_lock.h"
#include "gateway/flags.h"
#include "gateway/status.h"
#include "gateway/token_refused.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "storage_adapters/postgres/fence_schema.h"

namespace fencegate {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitStale = 3;
constexpr int kExitInvalid = 4;
constexpr int kExitUnavailable = 5;
constexpr int kExitDenied = 7;
constexpr int kExitTokenRefused = 8;

constexpr char kUsage[] =
    "Usage: fencectl [--addr=HOST:PORT] [--timeout=SECONDS] [--json] COMMAND "
    "[flags]\n"
    "\n"
    "Commands:\n"
    "  write --domain=D --token=T --resource=ROUTE/PATH OPERATION\n"
    "        OPERATION is one of --put=DATA, --put-file=PATH, --append=DATA,\n"
    "        --append-file=PATH (PATH '-' reads stdin), --delete, or\n"
    "        --sql=STATEMENT with --param=TYPE:VALUE for $1, $2, ... in order\n"
    "        (TYPE: text, int64, float64, bool, bytes (hex), null), or\n"
    "        --statement=NAME with --param: a statement declared on the route\n"
    "  fence --domain=D --token=T    raise the domain's fence to T\n"
    "  get --domain=D                print the domain's fence\n"
    "  sequence --domain=D           raise the fence by one and print the new\n"
    "        token (the gateway as the sequencer of a lock without tokens)\n"
    "  lock [--ttl-ms=N] [--wait-ms=N] [--etcd-endpoint=H:P | --redis=H:P |\n"
    "        --redlock=H:P,H:P,H:P | --postgres=DSN | --zookeeper=H:P]\n"
    "        NAME -- COMMAND\n"
    "        take lock NAME from the gateway's lease service (or etcd, Redis,\n"
    "        Redlock, a PostgreSQL lock table, ZooKeeper), run\n"
    "        COMMAND with FENCEGATE_DOMAIN=NAME and FENCEGATE_TOKEN=<token> "
    "in\n"
    "        its environment, keep the lease alive, release it afterwards;\n"
    "        exit with COMMAND's code. If the lease is lost COMMAND gets\n"
    "        SIGTERM.\n"
    "  health [--route=NAME]        the gateway's health, or one route's\n"
    "        storage (route/NAME in the gRPC health service)\n"
    "  pg-setup --admin_dsn=DSN --role=ROLE [--schema=fencegate]\n"
    "        create (idempotently) in PostgreSQL what a postgres route needs:\n"
    "        the fence schema, its owner role, the fence table and function,\n"
    "        and the grants to the route's role ROLE (docs/postgres.md)\n"
    "\n"
    "The address defaults to $FENCEGATE_ADDR, else 127.0.0.1:7070. TLS files\n"
    "default to $FENCEGATE_TLS_CA, $FENCEGATE_TLS_CERT, $FENCEGATE_TLS_KEY.\n"
    "Exit codes: 0 ok, 1 error, 2 usage, 3 stale token, 4 invalid request,\n"
    "5 unavailable or deadline exceeded, 6 lock not acquired or lost,\n"
    "7 permission denied or not authenticated, 8 token refused (no lock\n"
    "service granted it), 9 not serving (health).\n"
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
  std::string sql;
  std::string statement;
  std::string route;
  std::vector<std::string> params;
  client::TlsFiles tls;
  client::TlsFiles etcd_tls;
  uint64_t ttl_ms = 10000;
  std::string etcd_endpoint;
  std::string etcd_lock_prefix;
  std::string redis;
  std::string redlock;
  std::string redis_prefix;
  std::string postgres;
  std::string zookeeper;
  uint64_t wait_ms = 30000;
  std::string admin_dsn;
  std::string role;
  std::string schema = postgres::kDefaultFenceSchema;
  bool help = false;
};

// Parses TYPE:VALUE into a SqlValue; false with *error set if malformed.
bool ParseParam(const std::string& spec, v1::SqlValue* out,
                std::string* error) {
  size_t colon = spec.find(':');
  std::string type = spec.substr(0, colon);
  std::string value = colon == std::string::npos ? "" : spec.substr(colon + 1);
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

int RunPgSetup(const Flags& f) {
  if (f.admin_dsn.empty()) return UsageError("--admin_dsn is required");
  if (f.role.empty()) return UsageError("--role is required");
  absl::Status s = postgres::SetUpFenceSchema(f.admin_dsn, f.schema, f.role);
  if (s.ok()) {
    std::cout << "pg-setup: schema " << f.schema << " ready; role " << f.role
              << " may call " << f.schema
              << ".fence(text, bigint), fence_next(text, bigint) and "
                 "fences()\n";
    return kExitOk;
  }
  std::cerr << "fencectl: " << s.message() << "\n";
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
      return kExitUsage;
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
      return kExitInvalid;
    case absl::StatusCode::kUnavailable:
      return kExitUnavailable;
    default:
      return kExitError;
  }
}

int Run(int argc, char** argv) {
  Flags f;
  FlagSet set;
  set.String("addr", &f.addr,
             "gateway address (default $FENCEGATE_ADDR or "
             "127.0.0.1:7070)");
  set.Uint("timeout", &f.timeout_seconds,
           "RPC deadline in seconds (default 30)");
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
  set.String("sql", &f.sql, "write: one SQL statement (postgres routes)");
  set.String("statement", &f.statement,
             "write: a statement declared on the route, by name");
  set.StringList("param", &f.params,
                 "write: TYPE:VALUE parameter of --sql or --statement, "
                 "repeatable, in order");
  set.String("tls_ca", &f.tls.ca,
             "CA bundle (PEM) of the gateway's certificate: use TLS");
  set.String("tls_cert", &f.tls.cert,
             "client certificate (PEM), for a gateway that requires one");
  set.String("tls_key", &f.tls.key, "private key (PEM) of --tls_cert");
  set.String("etcd_tls_ca", &f.etcd_tls.ca,
             "lock: CA bundle (PEM) of etcd's certificate");
  set.String("etcd_tls_cert", &f.etcd_tls.cert,
             "lock: client certificate (PEM) for etcd");
  set.String("etcd_tls_key", &f.etcd_tls.key,
             "lock: private key (PEM) of --etcd_tls_cert");
  set.Uint("ttl_ms", &f.ttl_ms, "lock: lease time to live (default 10000)");
  set.Uint("wait_ms", &f.wait_ms,
           "lock: how long to wait for the lock; 0 tries once (default 30000)");
  set.String("etcd_endpoint", &f.etcd_endpoint,
             "lock: take the lock from etcd at host:port instead of the "
             "gateway's lease service");
  set.String("etcd_lock_prefix", &f.etcd_lock_prefix,
             "lock: etcd key prefix (default fencegate/locks)");
  set.String("redis", &f.redis,
             "lock: take the lock from Redis at host:port (its token from a "
             "counter beside the lock; the gateway's fence is raised to it)");
  set.String("redlock", &f.redlock,
             "lock: take the lock from a majority of these independent Redis "
             "servers, host:port,host:port,... (Redlock; the token from the "
             "gateway's Sequence)");
  set.String("postgres", &f.postgres,
             "lock: take the lock from a lease table in PostgreSQL (libpq "
             "DSN; the token from a sequence)");
  set.String("zookeeper", &f.zookeeper,
             "lock: take the lock from ZooKeeper at host:port[,host:port] "
             "(the token is the holder's znode's czxid; --ttl-ms is the "
             "session timeout)");
  set.String("redis_prefix", &f.redis_prefix,
             "lock: Redis key prefix (default fencegate)");
  set.String("admin_dsn", &f.admin_dsn,
             "pg-setup: libpq DSN or URI of a role that may create roles and "
             "schemas");
  set.String("role", &f.role, "pg-setup: the route's PostgreSQL role");
  set.String("route", &f.route, "health: the route whose storage to ask for");
  set.String("schema", &f.schema,
             "pg-setup: schema of the fence table (default fencegate)");
  set.Bool("help", &f.help, "print this help");

  std::vector<std::string> args;
  if (absl::Status s = set.Parse(argc, argv, 1, &args); !s.ok()) {
    return UsageError(std::string(s.message()));
  }
  if (f.help) {
    std::cout << kUsage << set.Usage();
    return kExitOk;
  }
  if (args.empty()) return UsageError("a command is required");
  const std::string command = args[0];
  if (f.addr.empty()) {
    const char* env = std::getenv("FENCEGATE_ADDR");
    f.addr = env != nullptr && *env != '\0' ? env : "127.0.0.1:7070";
  }
  f.tls = client::WithTlsEnvironment(f.tls);
  if (command == "lock") {
    if (args.size() < 3) {
      return UsageError("lock takes NAME -- COMMAND [ARGS...]");
    }
    LockFlags lock{f.addr,         f.tls,           f.ttl_ms,
                   f.wait_ms,      f.etcd_endpoint, f.etcd_lock_prefix,
                   f.etcd_tls,     f.redis,         f.redlock,
                   f.redis_prefix, f.postgres,      f.zookeeper};
    return RunLocked(lock, args[1], {args.begin() + 2, args.end()});
  }
  if (args.size() != 1) return UsageError("exactly one command is expected");
  if (command == "pg-setup") return RunPgSetup(f);
  if (command == "health") {
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
        client::ChannelCredentials(f.tls);
    if (!credentials.ok()) {
      return UsageError(std::string(credentials.status().message()));
    }
    return RunHealth(grpc::CreateChannel(f.addr, *credentials), f.route,
                     absl::Seconds(f.timeout_seconds), f.json);
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
  if ((command == "fence" || command == "get" || command == "sequence") &&
      !set.WasSet("domain")) {
    return UsageError("--domain is required");
  }

  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      client::ChannelCredentials(f.tls);
  if (!credentials.ok()) {
    return UsageError(std::string(credentials.status().message()));
  }
  auto channel = grpc::CreateChannel(f.addr, *credentials);
  auto stub = v1::Gateway::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(f.timeout_seconds));

  if (command == "write") {
    if (f.resource.empty()) return UsageError("--resource is required");
    int ops = set.WasSet("put") + set.WasSet("put_file") +
              set.WasSet("append") + set.WasSet("append_file") + f.del +
              set.WasSet("sql") + set.WasSet("statement");
    if (ops != 1) {
      return UsageError(
          "write takes exactly one of --put, --put-file, --append, "
          "--append-file, --delete, --sql, --statement");
    }
    const bool sql = set.WasSet("sql") || set.WasSet("statement");
    if (!f.params.empty() && !sql) {
      return UsageError("--param goes with --sql or --statement");
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
    } else if (sql) {
      if (set.WasSet("sql")) {
        op->mutable_sql()->set_sql(f.sql);
      } else {
        op->mutable_sql()->set_statement(f.statement);
      }
      for (const std::string& spec : f.params) {
        if (!ParseParam(spec, op->mutable_sql()->add_params(), &error)) {
          return UsageError(error);
        }
      }
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
    std::string text =
        absl::StrCat("ok: ", Describe(response.fence()),
                     response.fence_advanced() ? " (advanced)" : "");
    if (response.results_size() > 0 && response.results(0).has_file()) {
      const v1::FileResult& r = response.results(0).file();
      absl::StrAppend(&text, " size=", r.size(),
                      " written=", r.bytes_written());
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
    Print(response, f.json, text);
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
  if (command == "sequence") {
    v1::SequenceRequest request;
    request.set_domain(f.domain);
    request.set_request_id(f.request_id);
    v1::FenceState response;
    grpc::Status status = stub->Sequence(&context, request, &response);
    if (!status.ok()) return ReportError(status);
    Print(response, f.json, absl::StrCat(response.highest_token()));
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
