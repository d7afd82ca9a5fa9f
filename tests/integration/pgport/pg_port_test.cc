// Copyright fencegate authors.
//
// The PostgreSQL port (docs/pgwire.md) with real clients -- psql, pgbench,
// psycopg 3 and libpqxx -- in front of a real PostgreSQL server: fenced
// writes land, stale ones touch nothing, a raise mid-transaction waits for the
// transaction, idle and killed clients' transactions are rolled back, COPY and
// cancel work, bad bytes close only their own session, and two gateways hand a
// domain over through the database's fence.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "fencegate/v1/gateway.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "libpq-fe.h"
#include "pqxx/pqxx"
#include "security/scram.h"
#include "tests/fixtures.h"
#include "tests/pg_port_fixture.h"
#include "tests/postgres_adapter_fixture.h"

namespace fencegate {
namespace {

// Runs `sql` on `c` with libpq itself (libpqxx 6.4 leaks the result of a
// query on a connection that broke: tests/lsan.supp); its status.
ExecStatusType ExecStatus(PGconn* c, const char* sql) {
  PGresult* r = PQexec(c, sql);
  const ExecStatusType status = PQresultStatus(r);
  PQclear(r);
  return status;
}

using ::testing::HasSubstr;

TEST_F(PgPortTest, AFencedUpdateLandsAndAStaleOneTouchesNothing) {
  auto g = StartGateway();
  ASSERT_NE(g, nullptr);
  std::string out, err;
  ASSERT_EQ(Psql(*g, Options(5),
                 {"UPDATE jobs SET owner = 't5' WHERE id = 1",
                  "SHOW fencegate.token"},
                 &out, &err),
            0)
      << err;
  EXPECT_EQ(out, "5\n");
  EXPECT_EQ(Owner(), "t5");
  EXPECT_EQ(StoredFence(kDomain), 5);
  // Stale at this gateway: refused before anything reaches the database.
  EXPECT_NE(Psql(*g, Options(4), {"UPDATE jobs SET owner = 't4' WHERE id = 1"},
                 &out, &err),
            0);
  EXPECT_THAT(err, HasSubstr("stale fencing token 4 for domain \"jobs-lock\": "
                             "the highest token seen is 5"));
  EXPECT_EQ(Owner(), "t5");
  // Equal is accepted, in a block and in a string of statements.
  ASSERT_EQ(Psql(*g, Options(5),
                 {"BEGIN; UPDATE jobs SET owner = 'a' WHERE id = 1; COMMIT; "
                  "UPDATE jobs SET owner = owner || 'b' WHERE id = 1"},
                 &out, &err),
            0)
      << err;
  EXPECT_EQ(Owner(), "ab");
  // DEALLOCATE ALL drops the session's prepared fence too; the next
  // transaction prepares it again.
  ASSERT_EQ(Psql(*g, Options(5),
                 {"UPDATE jobs SET owner = 'c' WHERE id = 1", "DEALLOCATE ALL",
                  "UPDATE jobs SET owner = owner || 'd' WHERE id = 1"},
                 &out, &err),
            0)
      << err;
  EXPECT_EQ(Owner(), "cd");
}

TEST_F(PgPortTest, ExtendedProtocolClientsAreFencedToo) {
  auto g = StartGateway();
  ASSERT_NE(g, nullptr);
  std::string out, err;
  ASSERT_EQ(Python(R"py(
with psycopg.connect(DSN) as c:
    with c.cursor() as cur:
        cur.execute("UPDATE jobs SET owner = %s WHERE id = %s", ("p1", 1), prepare=True)
        cur.execute("UPDATE jobs SET owner = owner || %s WHERE id = %s", ("p2", 1), prepare=True)
        cur.execute("SELECT owner, id FROM jobs WHERE id = %s", (1,), binary=True)
        print(cur.fetchone()[0])
)py",
                   Dsn(*g, Options(7)), &out, &err),
            0)
      << err;
  EXPECT_EQ(out, "p1p2\n");
  EXPECT_EQ(Owner(), "p1p2");
  // A stale token: the session is refused before anything is sent, with
  // the highest token in the message.
  ASSERT_EQ(Python(R"py(
try:
    c = psycopg.connect(DSN)
    c.execute("UPDATE jobs SET owner = %s WHERE id = %s", ("p6", 1), prepare=True)
    print("served")
except psycopg.OperationalError as e:
    print("stale fencing token 6" in str(e), "is 7" in str(e))
)py",
                   Dsn(*g, Options(6)), &out, &err),
            0)
      << err;
  EXPECT_EQ(out, "True True\n");
  EXPECT_EQ(Owner(), "p1p2");
  // libpqxx's prepared statements.
  pqxx::connection c(PqxxDsn(*g, Options(8)));
  c.prepare("set_owner", "UPDATE jobs SET owner = $1 WHERE id = $2");
  {
    pqxx::work tx(c);
    tx.exec_prepared("set_owner", "pqxx", 1);
    tx.commit();
  }
  EXPECT_EQ(Owner(), "pqxx");
  EXPECT_EQ(StoredFence(kDomain), 8);
}

TEST_F(PgPortTest, PgbenchRunsInEveryQueryMode) {
  auto g = StartGateway();
  ASSERT_NE(g, nullptr);
  testing::TempDir dir;
  const std::string script = dir.path() + "/update.sql";
  std::ofstream(script)
      << "UPDATE jobs SET amount = amount + 1 WHERE id = 1;\n";
  for (const char* mode : {"simple", "extended", "prepared"}) {
    std::string out, err;
    EXPECT_EQ(
        testing::RunCommand(
            {"/usr/bin/env", "PGOPTIONS=" + Options(9), "pgbench", "-n", "-h",
             "127.0.0.1", "-p", absl::StrCat(g->pg_port), "-U", "worker", "-M",
             mode, "-c", "2", "-t", "20", "-f", script, "db"},
            &out, &err),
        0)
        << mode << ": " << err;
  }
  EXPECT_EQ(Exec("SELECT amount FROM jobs WHERE id = 1")[0][0].as<int64_t>(),
            3 * 2 * 20);
}

TEST_F(PgPortTest, ARaiseDuringATransactionWaitsForItsCommit) {
  auto g = StartGateway();
  ASSERT_NE(g, nullptr);
  // libpq itself: libpqxx 6.4 leaks the result of a query on a connection
  // that broke (tests/lsan.supp), which this one does.
  PGconn* c = PQconnectdb(PqxxDsn(*g, Options(5)).c_str());
  ASSERT_EQ(PQstatus(c), CONNECTION_OK) << PQerrorMessage(c);
  auto run = [c](const char* sql) { return ExecStatus(c, sql); };
  ASSERT_EQ(run("BEGIN"), PGRES_COMMAND_OK) << PQerrorMessage(c);
  ASSERT_EQ(run("UPDATE jobs SET owner = 'old holder' WHERE id = 1"),
            PGRES_COMMAND_OK)
      << PQerrorMessage(c);
  // The next holder's Fence raises the database's fence, which waits for
  // the session's hold while its transaction runs.
  std::future<grpc::Status> fenced =
      std::async(std::launch::async, [&] { return Fence(*g, 6); });
  ASSERT_TRUE(testing::WaitFor(
      [] {
        return Exec(
                   "SELECT count(*) FROM pg_stat_activity WHERE "
                   "wait_event_type = 'Lock'")[0][0]
                   .as<int64_t>() == 1;
      },
      absl::Seconds(30)));
  EXPECT_EQ(run("COMMIT"), PGRES_COMMAND_OK) << PQerrorMessage(c);
  grpc::Status s = fenced.get();
  EXPECT_TRUE(s.ok()) << s.error_message();
  // The old holder's transaction landed before the raise, and nothing of it
  // lands after.
  EXPECT_EQ(Owner(), "old holder");
  EXPECT_EQ(StoredFence(kDomain), 6);
  // Its session gave the domain up once its transaction ended, which ended
  // the session: nothing more of it runs.
  EXPECT_NE(run("UPDATE jobs SET owner = 'late' WHERE id = 1"),
            PGRES_COMMAND_OK);
  PQfinish(c);
  EXPECT_EQ(Owner(), "old holder");
}

TEST_F(PgPortTest, AnIdleTransactionIsEndedAndRolledBack) {
  auto g = StartGateway({"--pg_idle_transaction_timeout_ms=300"});
  ASSERT_NE(g, nullptr);
  // libpq itself: libpqxx 6.4 leaks the result of a query on a connection
  // that broke (tests/lsan.supp).
  PGconn* c = PQconnectdb(PqxxDsn(*g, Options(5)).c_str());
  ASSERT_EQ(PQstatus(c), CONNECTION_OK) << PQerrorMessage(c);
  auto run = [c](const char* sql) { return ExecStatus(c, sql); };
  ASSERT_EQ(run("BEGIN"), PGRES_COMMAND_OK);
  ASSERT_EQ(run("UPDATE jobs SET owner = 'paused' WHERE id = 1"),
            PGRES_COMMAND_OK);
  // The client pauses; the gateway ends the session.
  ASSERT_TRUE(testing::WaitFor(
      [] { return WorkerBackends("idle in transaction") == 0; },
      absl::Seconds(30)));
  EXPECT_NE(run("UPDATE jobs SET owner = 'resumed' WHERE id = 1"),
            PGRES_COMMAND_OK);
  EXPECT_THAT(std::string(PQerrorMessage(c)),
              HasSubstr("idle in a transaction"));
  PQfinish(c);
  EXPECT_EQ(Owner(), "nobody");
}

TEST_F(PgPortTest, AClientKilledMidTransactionIsRolledBack) {
  auto g = StartGateway();
  ASSERT_NE(g, nullptr);
  testing::TempDir dir;
  const std::string log = dir.path() + "/client.log";
  const pid_t client = testing::SpawnServer(
      {"/usr/bin/python3", "-c",
       absl::StrCat("import psycopg, time\n"
                    "c = psycopg.connect(\"host=127.0.0.1 port=",
                    g->pg_port, " user=worker dbname=db options='", Options(5),
                    "'\")\n"
                    "c.execute(\"UPDATE jobs SET owner = 'killed' WHERE id = "
                    "1\")\n"
                    "print('ready', flush=True)\n"
                    "time.sleep(120)\n")},
      log);
  ASSERT_GT(client, 0);
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        std::ifstream in(log);
        std::string text((std::istreambuf_iterator<char>(in)), {});
        return text.find("ready") != std::string::npos;
      },
      absl::Seconds(30)));
  EXPECT_EQ(WorkerBackends("idle in transaction"), 1);
  ::kill(client, SIGKILL);
  ASSERT_TRUE(testing::WaitFor(
      [] { return WorkerBackends("idle in transaction") == 0; },
      absl::Seconds(30)));
  EXPECT_EQ(Owner(), "nobody");
}

TEST_F(PgPortTest, AClientThatDoesNotReadHoldsBackItsServerNotThePortsMemory) {
  auto g = StartGateway();
  ASSERT_NE(g, nullptr);
  testing::TempDir dir;
  // 400 MB of rows asked for by a client that then reads nothing.
  const pid_t client = testing::SpawnServer(
      {"/usr/bin/python3", "-c",
       absl::StrCat(
           "import socket, struct, time\n"
           "s = socket.create_connection(('127.0.0.1', ",
           g->pg_port,
           "))\n"
           "s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)\n"
           "p = b'user\\0worker\\0database\\0db\\0\\0'\n"
           "s.sendall(struct.pack('!ii', 8 + len(p), 196608) + p)\n"
           "got = b''\n"
           "while b'Z\\0\\0\\0\\x05' not in got: got += s.recv(65536)\n"
           "q = b\"SELECT repeat('x', 2000) FROM generate_series(1, "
           "200000)\\0\"\n"
           "s.sendall(b'Q' + struct.pack('!i', 4 + len(q)) + q)\n"
           "time.sleep(120)\n")},
      dir.path() + "/client.log");
  ASSERT_GT(client, 0);
  auto writing = [] {
    return Exec(
               "SELECT count(*) FROM pg_stat_activity WHERE wait_event = "
               "'ClientWrite' AND query LIKE 'SELECT repeat%'")[0][0]
        .as<int>();
  };
  // The server waits to write once the port stops reading it...
  EXPECT_TRUE(
      testing::WaitFor([&] { return writing() == 1; }, absl::Seconds(60)));
  // ...and the port holds a few MB of the rows, not all of them.
  const int64_t rss_kb = testing::ProcStatusKb(g->process->pid(), "VmRSS");
  EXPECT_GT(rss_kb, 0);
  // Under the sanitizers the gateway's own overhead (shadow memory, ASan's
  // quarantine) comes on top; still far below the 400 MB asked for.
  EXPECT_LT(rss_kb, (testing::kUndefinedSanitizer ? 250 : 150) << 10);
  ::kill(client, SIGKILL);
  ASSERT_TRUE(
      testing::WaitFor([&] { return writing() == 0; }, absl::Seconds(30)));
}

TEST_F(PgPortTest, CopyRunsBothWaysAndCancelStopsAQuery) {
  auto g = StartGateway();
  ASSERT_NE(g, nullptr);
  std::string out, err;
  ASSERT_EQ(Python(R"py(
import threading
with psycopg.connect(DSN, autocommit=True) as c:
    with c.cursor() as cur:
        with cur.copy("COPY jobs (id, owner) FROM STDIN") as copy:
            copy.write_row((2, "copied"))
            copy.write_row((3, "in"))
        with cur.copy("COPY (SELECT owner FROM jobs ORDER BY id) TO STDOUT") as copy:
            print(",".join(bytes(r).decode().strip() for r in copy))
    threading.Timer(0.5, c.cancel).start()
    try:
        c.execute("SELECT pg_sleep(60)")
    except psycopg.errors.QueryCanceled:
        print("cancelled")
    print(c.execute("SELECT count(*) FROM jobs").fetchone()[0])
)py",
                   Dsn(*g, Options(5)), &out, &err),
            0)
      << err;
  EXPECT_EQ(out, "nobody,copied,in\ncancelled\n3\n");
}

// Sends `bytes`, then reads until the port closes the connection.
TEST_F(PgPortTest, BadBytesCloseOnlyTheirOwnSession) {
  auto g = StartGateway();
  ASSERT_NE(g, nullptr);
  // A session stays open throughout.
  pqxx::connection bystander(PqxxDsn(*g, Options(5)));
  // A startup packet of another protocol version.
  std::string reply = Exchange(g->pg_port, Int32(8) + Int32(2 << 16));
  EXPECT_THAT(reply, HasSubstr("08P01"));
  const std::string params = std::string("user\0w\0database\0db\0\0", 20);
  const std::string startup =
      Int32(8 + params.size()) + Int32(3 << 16) + params;
  // A FunctionCall, which the port does not serve.
  reply = Exchange(g->pg_port, startup + "F" + Int32(4));
  EXPECT_THAT(reply, HasSubstr("08P01"));
  // A message longer than --max_message_bytes, refused from its header.
  reply = Exchange(g->pg_port, startup + "Q" + Int32(1 << 30));
  EXPECT_THAT(reply, HasSubstr("54000"));
  pqxx::work tx(bystander);
  tx.exec0("UPDATE jobs SET owner = 'still here' WHERE id = 1");
  tx.commit();
  EXPECT_EQ(Owner(), "still here");
}

TEST_F(PgPortTest, ASilentConnectionIsClosedAfterTheHandshakeTimeout) {
  auto g = StartGateway({"--handshake_timeout_seconds=1"});
  ASSERT_NE(g, nullptr);
  // Connects and sends nothing: the port closes it (recv sees the end)
  // long before the client's own 60 s run out.
  std::string out, err;
  ASSERT_EQ(testing::RunCommand(
                {"/usr/bin/python3", "-c",
                 absl::StrCat("import socket\n"
                              "s = socket.create_connection(('127.0.0.1', ",
                              g->pg_port,
                              "))\n"
                              "s.settimeout(60)\n"
                              "print('closed' if s.recv(1) == b'' else "
                              "'data')\n")},
                &out, &err),
            0)
      << err;
  EXPECT_EQ(out, "closed\n");
  EXPECT_EQ(Psql(*g, Options(5), {"SELECT 1"}, &out, &err), 0) << err;
}

TEST_F(PgPortTest, AStatementPastTheRoutesTimeoutIsCancelledWhateverItSet) {
  auto g = StartGateway({}, "statement_timeout_ms=500");
  ASSERT_NE(g, nullptr);
  std::string out, err;
  // The session lifts the server's statement_timeout; the port's own limit
  // (the route's, and a second) still cancels the statement.
  EXPECT_NE(
      Psql(*g, Options(5), {"SET statement_timeout = 0", "SELECT pg_sleep(60)"},
           &out, &err),
      0);
  EXPECT_THAT(err, HasSubstr("canceling statement due to user request"));
  // The session goes on.
  EXPECT_EQ(Psql(*g, Options(5), {"SELECT 1"}, &out, &err), 0) << err;
}

TEST_F(PgPortTest, TwoGatewaysHandADomainOverThroughTheDatabase) {
  auto a = StartGateway();
  auto b = StartGateway();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  std::string out, err;
  ASSERT_EQ(Psql(*a, Options(5), {"UPDATE jobs SET owner = 'a5' WHERE id = 1"},
                 &out, &err),
            0)
      << err;
  // The next holder fences through the other gateway.
  grpc::Status s = Fence(*b, 6);
  ASSERT_TRUE(s.ok()) << s.error_message();
  // Gateway a still holds 5 itself; the database refuses the old holder.
  EXPECT_NE(
      Psql(*a, Options(5), {"UPDATE jobs SET owner = 'a5 late' WHERE id = 1"},
           &out, &err),
      0);
  EXPECT_THAT(err, HasSubstr("stale fencing token 5"));
  EXPECT_THAT(err, HasSubstr("is 6"));
  EXPECT_EQ(Owner(), "a5");
  ASSERT_EQ(Psql(*b, Options(6), {"UPDATE jobs SET owner = 'b6' WHERE id = 1"},
                 &out, &err),
            0)
      << err;
  EXPECT_EQ(Owner(), "b6");
  // Gateway a learnt the database's fence from the refusal.
  EXPECT_TRUE(
      testing::WaitFor([&] { return GetFence(*a) == 6; }, absl::Seconds(30)));
}

TEST_F(PgPortTest, SignInNeedsTheUsersPasswordAndARoute) {
  testing::TempDir dir;
  const std::string users = dir.path() + "/users.txt";
  std::ofstream(users) << "\"worker\" \""
                       << MakeScramVerifier("right horse", "0123456789abcdef",
                                            4096)
                       << "\"\n";
  auto g = StartGateway({"--pg_user_file=" + users});
  ASSERT_NE(g, nullptr);
  std::string out, err;
  EXPECT_EQ(Psql(*g, "", {"SELECT 1"}, &out, &err, "db", "right horse"), 0)
      << err;
  EXPECT_NE(Psql(*g, "", {"SELECT 1"}, &out, &err, "db", "wrong horse"), 0);
  EXPECT_THAT(err,
              HasSubstr("password authentication failed for user \"worker\""));
  EXPECT_NE(Psql(*g, "", {"SELECT 1"}, &out, &err, "nosuch", "right horse"), 0);
  EXPECT_THAT(err, HasSubstr("database \"nosuch\" is not a PostgreSQL route of "
                             "this gateway; its PostgreSQL routes: db"));
}

}  // namespace
}  // namespace fencegate
