// Copyright fencegate authors.
//
// fencectl: command-line client of a running fencegate, with one subcommand
// per task (write, fence, get, sequence, lock, health, pg-setup), each with
// its own flags and help (`fencectl write --help`). The command line is
// parsed by CLI11; global flags (--addr, --timeout, --json, TLS) go before
// or after the subcommand, a subcommand's flags after it. In flag names '-'
// and '_' are the same: --put-file is --put_file. Exit codes:
// exit_codes.h.

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fencegate/client/tls.h"
#include "fencegate/common/flag_args.h"
#include "grpcpp/create_channel.h"
#include "postgres/fence_schema.h"
#include "postgres/read_role.h"
#include "tools/fencectl/exit_codes.h"
#include "tools/fencectl/gateway_commands.h"
#include "tools/fencectl/health.h"
#include "tools/fencectl/lock.h"

namespace fencegate::fencectl {
namespace {

constexpr char kFooter[] =
    "The address defaults to $FENCEGATE_ADDR, else 127.0.0.1:7070. TLS files\n"
    "default to $FENCEGATE_TLS_CA, $FENCEGATE_TLS_CERT, $FENCEGATE_TLS_KEY.\n"
    "In flag names '-' and '_' are the same (--put-file, --put_file).\n"
    "A flag given twice takes its last value.\n"
    "Exit codes: 0 ok, 1 error, 2 usage, 3 stale token, 4 invalid request,\n"
    "5 unavailable or deadline exceeded, 6 lock not acquired or lost,\n"
    "7 permission denied or not authenticated, 8 token refused (no lock\n"
    "service granted it), 9 not serving (health), 10 seq out of order\n"
    "(write --seq), 11 precondition failed (write --if-absent,\n"
    "--if-version).";

// Every flag's value; CLI11 writes them.
struct Flags {
  std::string addr;
  uint64_t timeout_seconds = 30;
  bool json = false;
  client::TlsFiles tls;
  std::string request_id;
  std::string domain;
  std::string token;
  WriteCommand write;
  std::string route;
  LockFlags lock;
  std::string lock_name;
  std::vector<std::string> command;
  std::string admin_dsn;
  std::string role;
  std::string schema = postgres::kDefaultFenceSchema;
  bool revoke_session_functions = false;
  std::string read_role;
  int64_t raise_wait_ms = postgres::kDefaultRaiseWaitMs;
  std::vector<std::string> session_functions_for;
};

// A token from 1 to 2^64-1 in plain decimal, or a usage error's message.
std::optional<std::string> ParseToken(const std::string& text,
                                      uint64_t* token) {
  if (text.empty() || text.size() > 20 ||
      !std::all_of(text.begin(), text.end(), absl::ascii_isdigit) ||
      !absl::SimpleAtoi(text, token) || *token == 0) {
    return absl::StrCat("--token: \"", text,
                        "\" is not a number from 1 to 18446744073709551615");
  }
  return std::nullopt;
}

// The exit code for a pg-setup error, after saying it.
int PgSetupFailed(const absl::Status& s) {
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

// pg-setup's last step: the read role, if one is named.
int SetUpReadRole(const Flags& f) {
  if (f.read_role.empty()) return kExitOk;
  if (absl::Status s =
          postgres::SetUpReadRole(f.admin_dsn, f.schema, f.read_role, f.role);
      !s.ok()) {
    return PgSetupFailed(s);
  }
  std::cout << "pg-setup: read role " << f.read_role
            << " granted pg_read_all_data, TEMP taken from it; give it to "
               "the route as read_user\n";
  return kExitOk;
}

int RunPgSetup(const Flags& f) {
  if (!f.revoke_session_functions && !f.session_functions_for.empty()) {
    return PgSetupFailed(absl::InvalidArgumentError(
        "--session_functions_for names who keeps the session functions: it "
        "needs --revoke_session_functions"));
  }
  absl::Status s = postgres::SetUpFenceSchema(f.admin_dsn, f.schema, f.role,
                                              f.raise_wait_ms);
  if (!s.ok()) return PgSetupFailed(s);
  std::cout << "pg-setup: schema " << f.schema << " ready; role " << f.role
            << " may call " << f.schema
            << ".fence(text, bigint), fence_seq(text, bigint, bigint), "
               "fence_next(text, bigint) and fences()\n";
  if (!f.revoke_session_functions) return SetUpReadRole(f);
  absl::StatusOr<std::vector<std::string>> revoked =
      postgres::RevokeSessionFunctions(f.admin_dsn, f.role,
                                       f.session_functions_for);
  if (!revoked.ok()) return PgSetupFailed(revoked.status());
  std::cout << "pg-setup: EXECUTE revoked from PUBLIC and " << f.role << " on "
            << revoked->size()
            << " session functions: " << absl::StrJoin(*revoked, ", ") << "\n";
  std::cout << "pg-setup: granted back to: "
            << (f.session_functions_for.empty()
                    ? std::string("nobody (superusers keep them)")
                    : absl::StrJoin(f.session_functions_for, ", "))
            << "\n";
  return SetUpReadRole(f);
}

// The subcommands and their flags, writing into `f`.
struct Commands {
  CLI::App* write;
  CLI::App* fence;
  CLI::App* get;
  CLI::App* sequence;
  CLI::App* lock;
  CLI::App* health;
  CLI::App* pg_setup;
  // write's operations, one of which must be given.
  std::vector<CLI::Option*> operations;
  CLI::Option* params;
};

Commands Define(CLI::App& app, Flags& f) {
  app.footer(kFooter);
  app.require_subcommand(1);
  // A flag given twice takes its last value, as psql and etcdctl do, so
  // that a wrapper's defaults can be overridden after them; the lists
  // (--param, --session_functions_for, lock's command) keep every value.
  // Subcommands inherit this.
  app.option_defaults()->multi_option_policy(
      CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--addr", f.addr, "gateway address host:port");
  app.add_option("--timeout", f.timeout_seconds,
                 "RPC deadline in seconds, 1 to 86400")
      ->capture_default_str();
  app.add_flag("--json", f.json, "print the response as JSON");
  app.add_option("--tls_ca", f.tls.ca,
                 "CA bundle (PEM) of the gateway's certificate: use TLS");
  app.add_option("--tls_cert", f.tls.cert,
                 "client certificate (PEM), for a gateway that requires one");
  app.add_option("--tls_key", f.tls.key, "private key (PEM) of --tls_cert");

  Commands c;
  auto add = [&](const char* name, const char* help) {
    CLI::App* sub = app.add_subcommand(name, help);
    sub->fallthrough();  // The global flags after it too.
    return sub;
  };
  c.write = add("write",
                "apply one operation to ROUTE/PATH, fenced by --domain and "
                "--token");
  c.write->add_option("--domain", f.write.domain,
                      "fencing domain (default: the resource)");
  c.write->add_option("--token", f.token, "fencing token, 1 to 2^64-1")
      ->required();
  c.write->add_option("--resource", f.write.resource, "ROUTE/PATH")->required();
  c.write->add_option("--request_id", f.request_id, "id for the logs");
  c.write
      ->add_option("--seq", f.write.seq,
                   "the write's number within its token, 1 to 2^63-1 "
                   "(PostgreSQL and file routes): a write whose reply is "
                   "lost is sent again with it, and applied at most once")
      ->check(CLI::Range(uint64_t{1}, uint64_t{9223372036854775807ULL}));
  c.write
      ->add_option("--attempts", f.write.attempts,
                   "with --seq: attempts in all while the gateway or its "
                   "storage is unavailable or the deadline passes (each "
                   "attempt has --timeout)")
      ->check(CLI::Range(1, 100));
  CLI::Option* if_absent =
      c.write->add_flag("--if_absent", f.write.if_absent,
                        "file routes: apply only if the file does not exist");
  c.write
      ->add_option("--if_version", f.write.if_version,
                   "file routes: apply only if the file's version is N "
                   "(the version a write's result printed)")
      ->excludes(if_absent);
  c.operations = {
      c.write->add_option("--put", f.write.put, "replace the file with DATA"),
      c.write->add_option("--put_file", f.write.put_file,
                          "replace the file with a file's bytes ('-': stdin)"),
      c.write->add_option("--append", f.write.append, "append DATA"),
      c.write->add_option("--append_file", f.write.append_file,
                          "append a file's bytes ('-': stdin)"),
      c.write->add_flag("--delete", f.write.del, "delete the file"),
      c.write->add_option("--sql", f.write.sql,
                          "one SQL statement (PostgreSQL routes)"),
      c.write->add_option("--statement", f.write.statement,
                          "a statement declared on the route, by name")};
  c.params = c.write->add_option(
      "--param", f.write.params,
      "TYPE:VALUE for $1, $2, ... of --sql or --statement, in order; TYPE "
      "text, int64, float64, bool, bytes (hex) or null")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);

  c.fence = add("fence", "raise the domain's fence to --token");
  c.fence->add_option("--domain", f.domain, "fencing domain")->required();
  c.fence->add_option("--token", f.token, "fencing token, 1 to 2^64-1")
      ->required();
  c.fence->add_option("--request_id", f.request_id, "id for the logs");

  c.get = add("get", "print the domain's fence");
  c.get->add_option("--domain", f.domain, "fencing domain")->required();

  c.sequence = add("sequence",
                   "raise the fence by one and print the new token (the "
                   "gateway as the sequencer of a lock without tokens)");
  c.sequence->add_option("--domain", f.domain, "fencing domain")->required();
  c.sequence->add_option("--request_id", f.request_id, "id for the logs");

  c.lock = add("lock",
               "take lock NAME, run COMMAND with FENCEGATE_DOMAIN=NAME and "
               "FENCEGATE_TOKEN in its environment while keeping the lease "
               "alive, release it afterwards; exit with COMMAND's code (if "
               "the lease is lost COMMAND gets SIGTERM). The lock comes from "
               "the gateway's lease service unless a lock service is named");
  CLI::App* lock = c.lock;
  lock->add_option("--ttl_ms", f.lock.ttl_ms, "lease time to live")
      ->capture_default_str();
  lock->add_option("--wait_ms", f.lock.wait_ms,
                   "how long to wait for the lock; 0 tries once")
      ->capture_default_str();
  lock->add_option("--etcd_endpoint", f.lock.etcd_endpoint,
                   "take it from etcd at host:port");
  lock->add_option("--etcd_lock_prefix", f.lock.etcd_lock_prefix,
                   "etcd key prefix (default fencegate/locks)");
  lock->add_option("--etcd_tls_ca", f.lock.etcd_tls.ca,
                   "CA bundle (PEM) of etcd's certificate");
  lock->add_option("--etcd_tls_cert", f.lock.etcd_tls.cert,
                   "client certificate (PEM) for etcd");
  lock->add_option("--etcd_tls_key", f.lock.etcd_tls.key,
                   "private key (PEM) of --etcd_tls_cert");
  lock->add_option("--redis", f.lock.redis,
                   "take it from Redis at host:port (the token from a counter "
                   "beside the lock; the gateway's fence is raised to it)");
  lock->add_option("--redlock", f.lock.redlock,
                   "take it from a majority of independent Redis servers, "
                   "host:port,host:port,... (the token from the gateway's "
                   "Sequence)");
  lock->add_option("--redis_prefix", f.lock.redis_prefix,
                   "Redis key prefix (default fencegate)");
  lock->add_option("--postgres", f.lock.postgres,
                   "take it from a lease table in PostgreSQL (libpq DSN; the "
                   "token from a sequence)");
  lock->add_option("--zookeeper", f.lock.zookeeper,
                   "take it from ZooKeeper at host:port[,host:port] (the "
                   "token is the holder's czxid; --ttl_ms is the session "
                   "timeout)");
  lock->add_option("name", f.lock_name, "the lock's name")->required();
  lock->add_option("command", f.command, "the command and its arguments")
      ->required()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);

  c.health = add("health",
                 "the gateway's health, or one route's storage (route/NAME "
                 "in the gRPC health service)");
  c.health->add_option("--route", f.route,
                       "the route whose storage to ask for");

  c.pg_setup = add("pg-setup",
                   "create (idempotently) in PostgreSQL what a postgres route "
                   "needs: the fence schema, its owner role, the fence table "
                   "and functions, and the grants to the route's role");
  c.pg_setup
      ->add_option("--admin_dsn", f.admin_dsn,
                   "libpq DSN or URI of a role that may create roles and "
                   "schemas")
      ->required();
  c.pg_setup->add_option("--role", f.role, "the route's PostgreSQL role")
      ->required();
  c.pg_setup->add_option("--schema", f.schema, "schema of the fence table")
      ->capture_default_str();
  c.pg_setup->add_flag(
      "--revoke_session_functions", f.revoke_session_functions,
      "also revoke EXECUTE on the functions that reach session state "
      "(set_config, advisory locks, dblink, ...; docs/postgres.md) from "
      "PUBLIC and the route's role: defence in depth behind the SQL "
      "classifier, and required by the PostgreSQL port (its connections "
      "hold their fence with an advisory lock). Changes what every role of "
      "the database may call");
  c.pg_setup
      ->add_option("--raise_wait_ms", f.raise_wait_ms,
                   "how long a raise waits for the connections that hold the "
                   "domain's fence to give it up before it ends their "
                   "backends (docs/pgwire.md)")
      ->check(CLI::Range(int64_t{10}, int64_t{3600000}))
      ->capture_default_str();
  c.pg_setup->add_option(
      "--read_role", f.read_role,
      "an existing login role to serve the PostgreSQL port's sessions "
      "without a token: granted pg_read_all_data, TEMP taken from it; it "
      "must be neither the route's role nor a member of it "
      "(docs/pgwire.md)");
  c.pg_setup
      ->add_option("--session_functions_for", f.session_functions_for,
                   "roles that keep EXECUTE on them (comma-separated), with "
                   "--revoke_session_functions")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  return c;
}

int Dispatch(const Commands& c, Flags& f) {
  if (c.pg_setup->parsed()) return RunPgSetup(f);
  if (f.addr.empty()) {
    const char* env = std::getenv("FENCEGATE_ADDR");
    f.addr = env != nullptr && *env != '\0' ? env : "127.0.0.1:7070";
  }
  f.tls = client::WithTlsEnvironment(f.tls);
  if (c.lock->parsed()) {
    f.lock.addr = f.addr;
    f.lock.tls = f.tls;
    return RunLocked(f.lock, f.lock_name, f.command);
  }
  if (f.timeout_seconds == 0 || f.timeout_seconds > 86400) {
    return UsageError("--timeout: must be from 1 to 86400 seconds");
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      client::ChannelCredentials(f.tls);
  if (!credentials.ok()) {
    return UsageError(std::string(credentials.status().message()));
  }
  const GatewayCall call{grpc::CreateChannel(f.addr, *credentials),
                         absl::Seconds(f.timeout_seconds), f.json,
                         f.request_id};
  if (c.health->parsed()) {
    return RunHealth(call.channel, f.route, call.timeout, f.json);
  }
  if (c.get->parsed()) return RunGet(call, f.domain);
  if (c.sequence->parsed()) return RunSequence(call, f.domain);
  uint64_t token = 0;
  if (std::optional<std::string> error = ParseToken(f.token, &token)) {
    return UsageError(*error);
  }
  if (c.fence->parsed()) return RunFence(call, f.domain, token);
  const size_t given =
      std::count_if(c.operations.begin(), c.operations.end(),
                    [](const CLI::Option* o) { return o->count() > 0; });
  if (given != 1) {
    return UsageError(
        "write takes exactly one of --put, --put-file, --append, "
        "--append-file, --delete, --sql, --statement");
  }
  if (c.params->count() > 0 && !f.write.sql.has_value() &&
      !f.write.statement.has_value()) {
    return UsageError("--param goes with --sql or --statement");
  }
  f.write.token = token;
  return RunWrite(call, f.write);
}

int Run(int argc, char** argv) {
  CLI::App app("fencectl: command-line client of a fencegate gateway",
               "fencectl");
  Flags f;
  const Commands commands = Define(app, f);
  std::vector<std::string> args = FlagArgsForCli11(argc, argv);
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ExtrasError& e) {
    // Most often a command's flag given before the command.
    return UsageError(absl::StrCat(
        e.what(), "; a command's flags go after it (fencectl COMMAND --help)"));
  } catch (const CLI::ParseError& e) {
    return UsageError(e.what());
  }
  return Dispatch(commands, f);
}

}  // namespace
}  // namespace fencegate::fencectl

int main(int argc, char** argv) {
  try {
    return fencegate::fencectl::Run(argc, argv);
  } catch (const std::exception& e) {
    // A flag defined twice (a bug here) or memory exhausted.
    std::cerr << "fencectl: " << e.what() << "\n";
    return fencegate::fencectl::kExitError;
  }
}
