// Copyright fencegate authors.
//
// Fuzzes a Write request's bytes through what the gateway does with them
// before any fence can move: ParseWriteRequest (the raw-bytes reader with
// its operation count walk) and CheckWrite (fields, route, domain, named
// statements, the adapter's Validate) against a file route and a PostgreSQL
// route with named statements (the PostgreSQL adapter does not connect to
// validate). Checks, beyond "no crash, no UB, no leak":
//   - a request the reader accepts (its own walk over the top-level fields)
//     has at most kMaxOps operations once protobuf has parsed it;
//   - the checks are deterministic, and every refusal says why.

#include <cstdint>
#include <cstdlib>
#include <memory>

#include "gateway/write_request.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "storage_adapters/builtin.h"
#include "storage_adapters/registry.h"
#include "storage_adapters/router.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

constexpr uint32_t kMaxOps = 64;

const fencegate::Router& TheRouter() {
  static const fencegate::Router* router = [] {
    static fencegate::AdapterRegistry registry;
    fencegate::fuzz::CheckOk(fencegate::RegisterBuiltinAdapters(&registry),
                             "register adapters");
    std::vector<fencegate::RouteSpec> routes = {
        {"files", "file://" + fencegate::fuzz::ScratchDir("write") + "/files"},
        {"db",
         "postgres://fuzz@127.0.0.1:1/fuzz?pool_size=1",
         {{"complete_job", "UPDATE jobs SET done = true WHERE id = $1"},
          {"insert", "INSERT INTO t (a, b) VALUES ($1, $2)"}}},
        {"none", "noop://"}};
    auto created = fencegate::Router::Create(registry, routes);
    fencegate::fuzz::CheckOk(created.status(), "router");
    return created->release();
  }();
  return *router;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  grpc::Slice slice(data, size);
  grpc::ByteBuffer bytes(&slice, 1);
  fencegate::v1::WriteRequest request;
  if (!fencegate::ParseWriteRequest(bytes, kMaxOps, &request).ok()) return 0;
  FG_FUZZ_CHECK(request.ops_size() <= static_cast<int>(kMaxOps));

  fencegate::v1::WriteRequest again = request;
  fencegate::CheckedWrite checked, checked_again;
  const absl::Status s = fencegate::CheckWrite(TheRouter(), &request, &checked);
  const absl::Status s2 =
      fencegate::CheckWrite(TheRouter(), &again, &checked_again);
  FG_FUZZ_CHECK(s.code() == s2.code());
  if (!s.ok()) {
    FG_FUZZ_CHECK(!s.message().empty());
    return 0;
  }
  FG_FUZZ_CHECK(checked.domain == checked_again.domain);
  return 0;
}
