// Copyright fencegate authors.
//
// The fixture of the PostgreSQL adapter tests: one real PostgreSQL server per
// test binary, started by the fixture, a fresh `jobs` table per test, and
// helpers to build operations, apply them and read the database back.

#ifndef TESTS_POSTGRES_ADAPTER_FIXTURE_H_
#define TESTS_POSTGRES_ADAPTER_FIXTURE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fencegate/v1/gateway.pb.h"
#include "pqxx/pqxx"
#include "storage_adapters/builtin.h"
#include "storage_adapters/postgres/postgres_adapter.h"
#include "storage_adapters/registry.h"
#include "tests/postgres_server.h"
#include "tests/test_util.h"

namespace fencegate {

inline v1::SqlValue Text(const std::string& s) {
  v1::SqlValue v;
  v.set_text(s);
  return v;
}
inline v1::SqlValue Int(int64_t i) {
  v1::SqlValue v;
  v.set_int64(i);
  return v;
}

inline v1::Operation Sql(const std::string& sql,
                         std::initializer_list<v1::SqlValue> params = {}) {
  v1::Operation op;
  op.mutable_sql()->set_sql(sql);
  for (const v1::SqlValue& p : params) *op.mutable_sql()->add_params() = p;
  return op;
}

// Runs `sql` on `server` as its superuser, in a transaction of its own.
inline pqxx::result ExecAsAdmin(const testing::PostgresServer& server,
                                const std::string& sql) {
  pqxx::connection c(server.Conninfo());
  pqxx::work tx(c);
  pqxx::result r = tx.exec(sql);
  tx.commit();
  return r;
}

class PostgresAdapterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = testing::StartSuiteServer(&start_error_);
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(server_, nullptr) << start_error_;
    if (!server_->Restart().ok()) {
      // Already running: Restart() only starts a stopped server.
    }
    Exec("DROP TABLE IF EXISTS jobs");
    Exec("TRUNCATE fencegate.fences");
    Exec(
        "CREATE TABLE jobs (id bigint PRIMARY KEY, owner text, "
        "amount double precision, done boolean, payload bytea)");
    adapter_ = MakeAdapter("");
  }

  std::unique_ptr<StorageAdapter> MakeAdapter(
      const std::string& params, const AdapterContext& context = {}) {
    AdapterRegistry registry;
    EXPECT_OK(RegisterBuiltinAdapters(&registry));
    auto adapter = registry.Create(server_->Uri(params), context);
    EXPECT_TRUE(adapter.ok()) << adapter.status();
    return adapter.ok() ? *std::move(adapter) : nullptr;
  }

  // untimed(): switches the server's statement_timeout off for the rest of
  // the calling transaction, as a function the database's owner wrote
  // could. The classifier cannot see into a function, so what follows it
  // in the Write is bounded only by the gateway's own cancel.
  static void CreateUntimedFunction() {
    Exec(
        "CREATE OR REPLACE FUNCTION untimed() RETURNS void LANGUAGE sql AS "
        "$$SELECT set_config('statement_timeout', '0', true)$$");
    Exec("GRANT EXECUTE ON FUNCTION untimed() TO fencegate_worker");
  }

  // An adapter connecting as `role` (no password: the test server trusts
  // loopback), with the URI parameters `params`.
  std::unique_ptr<StorageAdapter> MakeAdapterAs(const std::string& role,
                                                const std::string& params) {
    AdapterRegistry registry;
    EXPECT_OK(RegisterBuiltinAdapters(&registry));
    auto adapter = registry.Create(absl::StrCat("postgres://", role,
                                                "@127.0.0.1:", server_->port(),
                                                "/postgres?", params));
    EXPECT_TRUE(adapter.ok()) << adapter.status();
    return adapter.ok() ? *std::move(adapter) : nullptr;
  }
  // Creates a role unless it exists (roles outlive a test's tables).
  static void CreateRole(const std::string& name, const std::string& options) {
    Exec(absl::StrCat(
        "DO $$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '",
        name, "') THEN CREATE ROLE ", name, " ", options, "; END IF; END$$"));
  }

  static pqxx::result Exec(const std::string& sql) {
    return ExecAsAdmin(*server_, sql);
  }
  // Ends every other client session of the test database, as an
  // administrator would (pg_terminate_backend), and waits until they are
  // gone; returns how many were ended, or -1 if they did not go within
  // 10 s.
  static int64_t TerminateClientBackends() {
    const pqxx::result ended = Exec(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE pid <> pg_backend_pid() AND backend_type = 'client backend' "
        "AND datname = current_database()");
    // pg_terminate_backend only signals; wait until the backends are gone.
    const bool gone = testing::WaitFor(
        [] {
          return Exec(
                     "SELECT count(*) FROM pg_stat_activity WHERE pid <> "
                     "pg_backend_pid() AND backend_type = 'client "
                     "backend'")[0][0]
                     .as<int64_t>() == 0;
        },
        absl::Seconds(10));
    return gone ? static_cast<int64_t>(ended.size()) : -1;
  }
  static int64_t Count(const std::string& where = "true") {
    return Exec("SELECT count(*) FROM jobs WHERE " + where)[0][0].as<int64_t>();
  }
  static int64_t StoredFence(const std::string& domain) {
    pqxx::result r = Exec(
        "SELECT token FROM fencegate.fences WHERE domain = '" + domain + "'");
    return r.empty() ? 0 : r[0][0].as<int64_t>();
  }

  absl::Status Apply(StorageAdapter* adapter, const std::string& domain,
                     uint64_t token, std::vector<v1::Operation> ops,
                     OpResults* results = nullptr) {
    Operations list;
    for (v1::Operation& op : ops) *list.Add() = std::move(op);
    WriteTarget target{domain, token, "jobs", ""};
    if (absl::Status s = adapter->Validate(target, list); !s.ok()) return s;
    OpResults local;
    return adapter->Apply(target, list, results ? results : &local);
  }
  absl::Status Apply(const std::string& domain, uint64_t token,
                     std::vector<v1::Operation> ops,
                     OpResults* results = nullptr) {
    return Apply(adapter_.get(), domain, token, std::move(ops), results);
  }

  static inline testing::PostgresServer* server_ = nullptr;

  static inline std::string start_error_;
  std::unique_ptr<StorageAdapter> adapter_;
};

}  // namespace fencegate

#endif  // TESTS_POSTGRES_ADAPTER_FIXTURE_H_
