// Copyright fencegate authors.
//
// The PostgreSQL port against an adversarial client (docs/pgwire.md,
// docs/security.md): what it cannot read exactly as the server will is
// refused, settings that change how the server reads text are pinned, no
// session reaches another's backend or random seed, a client that leaves
// takes its statement with it, and no input takes the gateway down.

#include <signal.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "libpq-fe.h"
#include "tests/pg_port_fixture.h"

namespace fencegate {
namespace {

using ::testing::HasSubstr;

class PgPortHardeningTest : public PgPortTest {
 protected:
  // A libpq connection to the port; `options` as PGOPTIONS would give them.
  static PGconn* Connect(const Gateway& g, const std::string& options,
                         const std::string& database = "db") {
    const std::string conninfo = absl::StrCat(
        "host=127.0.0.1 port=", g.pg_port, " user=worker dbname=", database,
        " options='", options, "'");
    return PQconnectdb(conninfo.c_str());
  }

  // Runs `sql` as a simple query; the SQLSTATE of its first error, or ""
  // if every statement succeeded. `message`: that error's text.
  static std::string Run(PGconn* c, const std::string& sql,
                         std::string* message = nullptr) {
    std::string state;
    if (PQsendQuery(c, sql.c_str()) != 1) {
      if (message != nullptr) *message = PQerrorMessage(c);
      return "send failed";
    }
    while (PGresult* r = PQgetResult(c)) {
      if (PQresultStatus(r) == PGRES_FATAL_ERROR && state.empty()) {
        const char* s = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        state = s != nullptr ? s : "no sqlstate";
        if (message != nullptr) *message = PQresultErrorMessage(r);
      }
      PQclear(r);
    }
    if (PQstatus(c) != CONNECTION_OK && state.empty()) state = "closed";
    return state;
  }

  // The gateway still serves: its process runs and a new session reads.
  static bool Serves(const Gateway& g) {
    if (kill(g.process->pid(), 0) != 0) return false;
    std::string out, err;
    return Psql(g, "", {"SELECT 1"}, &out, &err) == 0;
  }

  // `terms` terms of 1+1+...: a parse tree `terms` levels deep.
  static std::string DeepSum(int terms) {
    std::string sql = "SELECT 1";
    sql.reserve(sql.size() + 2 * static_cast<size_t>(terms));
    for (int i = 1; i < terms; ++i) sql += "+1";
    return sql;
  }
};

// A startup packet naming a database that is no route is answered with
// 3D000 before anything else happens, and the gateway serves on (it used
// to abort right after sending the error).
TEST_F(PgPortHardeningTest, AStartupNamingNoRouteLeavesTheGatewayServing) {
  auto g = StartGateway();
  ASSERT_NE(g, nullptr);
  for (int i = 0; i < 3; ++i) {
    PGconn* c = Connect(*g, "", "nosuch");
    EXPECT_NE(PQstatus(c), CONNECTION_OK);
    EXPECT_THAT(PQerrorMessage(c),
                HasSubstr("database \"nosuch\" is not a PostgreSQL route of "
                          "this gateway; its PostgreSQL routes: db"));
    PQfinish(c);
  }
  EXPECT_TRUE(Serves(*g));
}

// A query whose parse tree nests 30 000 levels (60 KB of 1+1+...) is
// refused as the parser's bound says, on the port's own thread, and the
// gateway serves on (it used to die of a stack overflow).
TEST_F(PgPortHardeningTest, ADeepExpressionIsRefusedNotACrash) {
  auto g = StartGateway();
  ASSERT_NE(g, nullptr);
  PGconn* c = Connect(*g, Options(1));
  ASSERT_EQ(PQstatus(c), CONNECTION_OK) << PQerrorMessage(c);
  std::string message;
  EXPECT_EQ(Run(c, DeepSum(30000), &message), "42601");
  EXPECT_THAT(message, HasSubstr("nests deeper than 1000 levels"));
  // The session goes on.
  EXPECT_EQ(Run(c, "UPDATE jobs SET owner = 'w1' WHERE id = 1"), "");
  PQfinish(c);
  EXPECT_EQ(Owner(), "w1");
  EXPECT_TRUE(Serves(*g));
}

// The same through the gRPC route: the Write is refused INVALID_ARGUMENT
// from gRPC's own thread, and the gateway serves on.
TEST_F(PgPortHardeningTest, ADeepExpressionInAWriteIsRefusedNotACrash) {
  auto g = StartGateway();
  ASSERT_NE(g, nullptr);
  auto stub = v1::Gateway::NewStub(grpc::CreateChannel(
      g->process->address(), grpc::InsecureChannelCredentials()));
  v1::WriteRequest request;
  request.set_domain(kDomain);
  request.set_token(1);
  request.set_resource("db/jobs");
  *request.add_ops() = Sql(DeepSum(30000));
  v1::WriteResponse response;
  grpc::ClientContext context;
  grpc::Status status = stub->Write(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << status.error_message();
  EXPECT_THAT(status.error_message(),
              HasSubstr("nests deeper than 1000 levels"));
  EXPECT_TRUE(Serves(*g));
}

}  // namespace
}  // namespace fencegate
