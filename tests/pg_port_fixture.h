// Copyright fencegate authors.
//
// The fixture of the PostgreSQL port's end-to-end suites: a real PostgreSQL
// server (PostgresAdapterTest), gateway processes serving the port on
// loopback, and psql, psycopg and libpqxx clients pointed at it.

#ifndef TESTS_PG_PORT_FIXTURE_H_
#define TESTS_PG_PORT_FIXTURE_H_

#include <arpa/inet.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "fencegate/v1/gateway.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "postgres/fence_schema.h"
#include "postgres/read_role.h"
#include "tests/fixtures.h"
#include "tests/postgres_adapter_fixture.h"

namespace fencegate {

using ::fencegate::testing::GatewayProcess;

inline constexpr char kDomain[] = "jobs-lock";

inline std::string Options(uint64_t token) {
  return absl::StrCat("-c fencegate.domain=", kDomain,
                      " -c fencegate.token=", token);
}

// Sends `bytes` on a new connection to `port`, then reads until the
// gateway closes it; what it read.
inline std::string Exchange(int port, const std::string& bytes) {
  const int fd = testing::ConnectLoopback(port);
  if (fd < 0) return "no connection";
  (void)!::write(fd, bytes.data(), bytes.size());
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) got.append(buf, n);
  ::close(fd);
  return got;
}

// `v` in network byte order.
inline std::string Int32(int32_t v) {
  const uint32_t n = htonl(static_cast<uint32_t>(v));
  return std::string(reinterpret_cast<const char*>(&n), 4);
}

class PgPortTest : public PostgresAdapterTest {
 protected:
  struct Gateway {
    testing::TempDir dir;
    std::unique_ptr<GatewayProcess> process;
    int pg_port = 0;
  };

  void SetUp() override {
    PostgresAdapterTest::SetUp();
    // The port serves a route only when its role cannot release the fence
    // its connection holds (pg-setup --revoke_session_functions).
    static bool revoked = false;
    if (!revoked) {
      absl::StatusOr<std::vector<std::string>> r =
          postgres::RevokeSessionFunctions(server_->Conninfo(),
                                           "fencegate_worker", {});
      ASSERT_TRUE(r.ok()) << r.status();
      // The read role of sessions without a token (StartGateway names it).
      CreateRole(kReadRole, "LOGIN");
      ASSERT_OK(postgres::SetUpReadRole(server_->Conninfo(), "fencegate",
                                        kReadRole, "fencegate_worker"));
      revoked = true;
    }
    Exec("INSERT INTO jobs (id, owner, amount) VALUES (1, 'nobody', 0)");
  }

  static constexpr char kReadRole[] = "fencegate_reader";

  // `route_params`: the route URI's query; read_user is kReadRole unless
  // it names one (or none: "read_user=").
  static std::unique_ptr<Gateway> StartGateway(
      const std::vector<std::string>& extra = {},
      const std::string& route_params = "") {
    auto g = std::make_unique<Gateway>();
    g->pg_port = testing::FreeLoopbackPort();
    std::string params = route_params;
    if (!absl::StrContains(params, "read_user=")) {
      absl::StrAppend(&params, params.empty() ? "" : "&",
                      "read_user=", kReadRole);
    }
    std::vector<std::string> args = {
        "--route=db=" + server_->Uri(params),
        absl::StrCat("--pg_listen=127.0.0.1:", g->pg_port)};
    args.insert(args.end(), extra.begin(), extra.end());
    auto process = GatewayProcess::Start(g->dir.path(), args);
    EXPECT_TRUE(process.ok()) << process.status();
    if (!process.ok()) return nullptr;
    g->process = *std::move(process);
    return g;
  }

  // psql -c `sql` through the port; its exit code.
  static int Psql(const Gateway& g, const std::string& options,
                  const std::vector<std::string>& sql, std::string* out,
                  std::string* err, const std::string& database = "db",
                  const std::string& password = "") {
    return testing::RunPsql(g.pg_port, database,
                            {"PGOPTIONS=" + options, "PGPASSWORD=" + password},
                            sql, out, err);
  }

  // A psycopg 3 script, given `dsn` as DSN; its exit code.
  static int Python(const std::string& script, const std::string& dsn,
                    std::string* out, std::string* err) {
    out->clear();
    err->clear();
    return testing::RunCommand(
        {"/usr/bin/python3", "-c",
         absl::StrCat("import psycopg, sys\nDSN = '", dsn, "'\n", script)},
        out, err);
  }
  static std::string Dsn(const Gateway& g, const std::string& options) {
    return absl::StrCat("host=127.0.0.1 port=", g.pg_port,
                        " user=worker dbname=db options=\\'", options, "\\'");
  }
  static std::string PqxxDsn(const Gateway& g, const std::string& options) {
    return absl::StrCat("host=127.0.0.1 port=", g.pg_port,
                        " user=worker dbname=db options='", options, "'");
  }

  static std::string Owner() {
    return Exec("SELECT owner FROM jobs WHERE id = 1")[0][0].as<std::string>();
  }

  static grpc::Status Fence(const Gateway& g, uint64_t token) {
    auto stub = v1::Gateway::NewStub(grpc::CreateChannel(
        g.process->address(), grpc::InsecureChannelCredentials()));
    v1::FenceRequest request;
    request.set_domain(kDomain);
    request.set_token(token);
    v1::FenceState state;
    grpc::ClientContext context;
    return stub->Fence(&context, request, &state);
  }
  static uint64_t GetFence(const Gateway& g) {
    auto stub = v1::Gateway::NewStub(grpc::CreateChannel(
        g.process->address(), grpc::InsecureChannelCredentials()));
    v1::GetFenceRequest request;
    request.set_domain(kDomain);
    v1::FenceState state;
    grpc::ClientContext context;
    grpc::Status s = stub->GetFence(&context, request, &state);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return state.highest_token();
  }

  // Backends of the route's role in `state` ("idle in transaction", ...).
  static int64_t WorkerBackends(const std::string& state) {
    return Exec(absl::StrCat(
        "SELECT count(*) FROM pg_stat_activity WHERE usename = "
        "'fencegate_worker' AND state = '",
        state, "'"))[0][0]
        .as<int64_t>();
  }
};

}  // namespace fencegate

#endif  // TESTS_PG_PORT_FIXTURE_H_
