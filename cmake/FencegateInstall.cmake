# Install rules. `cmake --install build --component client` installs the
# worker-side client library: static libraries, public headers under
# include/fencegate/ (#include "fencegate/client/token_source.h"), and a
# CMake package, so that a worker's CMakeLists can
# do
#
#   find_package(fencegate REQUIRED)
#   target_link_libraries(worker PRIVATE fencegate::client)
#
# fencegate::client is every token source; fencegate::client_core (lease
# service, RunExclusive, TLS), fencegate::client_etcd, client_redis,
# client_postgres and client_zookeeper link one system each. None of them
# links RocksDB or server code. The `server` component installs the
# fencegate and fencectl binaries.

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(_fencegate_exported
  fencegate_client_all:client
  fencegate_client:client_core
  fencegate_etcd:client_etcd
  fencegate_redis:client_redis
  fencegate_postgres_locks:client_postgres
  fencegate_zookeeper:client_zookeeper
  fencegate_common:common
  fencegate_proto:proto
  fencegate_etcd_connection:etcd_connection
  fencegate_etcd_proto:etcd_proto
  fencegate_zookeeper_session:zookeeper_session)
set(_fencegate_targets)
foreach(_pair ${_fencegate_exported})
  string(REPLACE ":" ";" _pair ${_pair})
  list(GET _pair 0 _target)
  list(GET _pair 1 _name)
  set_target_properties(${_target} PROPERTIES EXPORT_NAME ${_name})
  list(APPEND _fencegate_targets ${_target})
endforeach()

set(_fencegate_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/fencegate)
install(TARGETS ${_fencegate_targets}
  EXPORT fencegateTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT client
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
get_target_property(_fencegate_generated fencegate_proto FENCEGATE_GENERATED_DIR)
# Every header under fencegate/: fencegate/client/, fencegate/common/ (only
# the headers of the installed fencegate_common: not the tests' sync points,
# nor the programs' setting_value.h, flag_args.h, memory_budget.h and
# threads) and the API's fencegate/v1/*.pb.h.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/client/include/
                  ${PROJECT_SOURCE_DIR}/common/include/
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT client
  FILES_MATCHING PATTERN "*.h"
  PATTERN "sync_point.h" EXCLUDE
  PATTERN "setting_value.h" EXCLUDE
  PATTERN "flag_args.h" EXCLUDE
  PATTERN "memory_budget.h" EXCLUDE
  PATTERN "periodic_thread.h" EXCLUDE
  PATTERN "thread_name.h" EXCLUDE
  PATTERN "named_thread_pool.h" EXCLUDE)
install(DIRECTORY ${_fencegate_generated}/fencegate
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT client
  FILES_MATCHING PATTERN "*.h")
# The API's .proto files, for workers in other languages.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/proto/fencegate
                  ${PROJECT_SOURCE_DIR}/proto/google
  DESTINATION ${CMAKE_INSTALL_DATADIR}/fencegate/proto COMPONENT client)
install(EXPORT fencegateTargets NAMESPACE fencegate::
  DESTINATION ${_fencegate_cmake_dir} COMPONENT client)
configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/fencegateConfig.cmake.in
  ${PROJECT_BINARY_DIR}/fencegateConfig.cmake
  INSTALL_DESTINATION ${_fencegate_cmake_dir})
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/fencegateConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/fencegateConfig.cmake
              ${PROJECT_BINARY_DIR}/fencegateConfigVersion.cmake
  DESTINATION ${_fencegate_cmake_dir} COMPONENT client)

install(TARGETS fencegate fencectl
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT server)
