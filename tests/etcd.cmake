# etcd integration tests: EtcdTokenSource and the etcd token watcher against a real
# /usr/bin/etcd started by tests/etcd_server.cc. Included from
# tests/CMakeLists.txt.

# The etcd fixture is GoogleTest-free, so the benchmark harness uses it too.
add_library(fencegate_etcd_fixture etcd_server.cc)
target_link_libraries(fencegate_etcd_fixture
  PUBLIC fencegate_fixtures fencegate_etcd_proto gRPC::grpc++
         absl::status absl::statusor absl::strings absl::time)

add_library(fencegate_etcd_test_util INTERFACE)
target_link_libraries(fencegate_etcd_test_util
  INTERFACE fencegate_etcd_fixture fencegate_test_util)

fencegate_test(etcd_token_source_test fencegate_etcd fencegate_etcd_test_util
               absl::synchronization)
fencegate_test(etcd_watcher_test fencegate_etcd fencegate_token_watchers
               fencegate_etcd_test_util fencegate_fencing absl::synchronization)
fencegate_test(trust_etcd_test fencegate_etcd fencegate_etcd_test_util
               fencegate_gateway fencegate_client)
add_dependencies(trust_etcd_test fencegate fencectl)
