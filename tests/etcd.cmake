# etcd integration tests: EtcdTokenSource and EtcdFenceWatcher against a real
# /usr/bin/etcd started by tests/etcd_server.cc. Included from
# tests/CMakeLists.txt.

add_library(fencegate_etcd_test_util etcd_server.cc)
target_include_directories(fencegate_etcd_test_util PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(fencegate_etcd_test_util
  PUBLIC fencegate_test_util fencegate_etcd_proto gRPC::grpc++
         absl::status absl::statusor absl::strings absl::time)

fencegate_test(etcd_token_source_test fencegate_etcd fencegate_etcd_test_util
               absl::synchronization)
fencegate_test(etcd_fence_watcher_test fencegate_etcd fencegate_etcd_test_util
               absl::synchronization)
