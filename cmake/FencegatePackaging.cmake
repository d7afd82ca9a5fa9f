# Debian packages, built with CPack from a configured and built tree:
#
#   cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=Release
#   cmake --build build-rel -j"$(nproc)"
#   (cd build-rel && cpack -G DEB)
#
# fencegate            the gateway and fencectl (component server), the
#                      systemd unit, the example configuration and the
#                      logrotate snippet (component service), and the docs
#                      (component docs). Its shared-library dependencies
#                      are computed from the binaries (dpkg-shlibdeps).
# fencegate-client-dev the client libraries, headers and CMake package
#                      (component client, FencegateInstall.cmake).
#
# The service component installs to absolute paths (/etc, the unit
# directory): it is for packages only; `cmake --install --component server`
# still installs just the two binaries under the prefix.

# In a tree built with the tests, cpack packages what is built and rebuilds
# nothing first: the package test runs cpack while other tests run the
# tree's binaries, which a rebuild would replace under them.
if(FENCEGATE_BUILD_TESTS)
  set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY ON)
endif()

set(FENCEGATE_SYSTEMD_UNIT_DIR /lib/systemd/system CACHE PATH
    "Where the package puts fencegate.service")
set(FENCEGATE_PACKAGE_MAINTAINER "fencegate authors <fencegate@localhost>"
    CACHE STRING "The Maintainer field of the Debian packages")

install(FILES ${PROJECT_SOURCE_DIR}/packaging/fencegate.service
  DESTINATION ${FENCEGATE_SYSTEMD_UNIT_DIR} COMPONENT service)
install(FILES ${PROJECT_SOURCE_DIR}/packaging/fencegate.textproto
  DESTINATION /etc/fencegate COMPONENT service)
install(FILES ${PROJECT_SOURCE_DIR}/packaging/fencegate.logrotate
  DESTINATION /etc/logrotate.d RENAME fencegate COMPONENT service)
install(FILES ${PROJECT_SOURCE_DIR}/README.md
  DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT docs)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/
  DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT docs)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME fencegate)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "fencing-aware storage gateway: refuses writes with stale lock tokens")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_GROUPING ONE_PER_GROUP)
set(CPACK_COMPONENTS_ALL server service docs client)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER ${FENCEGATE_PACKAGE_MAINTAINER})
set(CPACK_DEBIAN_COMPRESSION_TYPE gzip)

set(CPACK_DEBIAN_FENCEGATE_PACKAGE_NAME fencegate)
set(CPACK_DEBIAN_FENCEGATE_PACKAGE_SECTION net)
set(CPACK_DEBIAN_FENCEGATE_PACKAGE_SHLIBDEPS ON)
# The maintainer scripts create the system user with adduser and manage
# the unit with systemctl.
set(CPACK_DEBIAN_FENCEGATE_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_FENCEGATE_PACKAGE_RECOMMENDS "systemd, logrotate")
set(CPACK_DEBIAN_FENCEGATE_DESCRIPTION
    "fencing-aware storage gateway
 Workers write through fencegate instead of straight to PostgreSQL or files;
 every write carries its lock's fencing token, and the gateway refuses a
 write whose token is lower than one it has seen, so a lock holder that
 paused past its lease cannot overwrite its successor.")
set(CPACK_DEBIAN_FENCEGATE_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/packaging/debian/postinst
    ${PROJECT_SOURCE_DIR}/packaging/debian/prerm
    ${PROJECT_SOURCE_DIR}/packaging/debian/postrm
    ${PROJECT_SOURCE_DIR}/packaging/debian/conffiles)
set(CPACK_DEBIAN_FENCEGATE_PACKAGE_CONTROL_STRICT_PERMISSION ON)

set(CPACK_DEBIAN_FENCEGATE-CLIENT-DEV_PACKAGE_NAME fencegate-client-dev)
set(CPACK_DEBIAN_FENCEGATE-CLIENT-DEV_PACKAGE_SECTION libdevel)
# Static libraries: what they link is what fencegateConfig.cmake finds.
set(CPACK_DEBIAN_FENCEGATE-CLIENT-DEV_PACKAGE_DEPENDS
    "libgrpc++-dev, libprotobuf-dev, libabsl-dev, libpq-dev, libpqxx-dev, libhiredis-dev, libzookeeper-mt-dev, pkg-config")
set(CPACK_DEBIAN_FENCEGATE-CLIENT-DEV_DESCRIPTION
    "fencegate client libraries (static), headers and CMake package
 Token sources (the gateway's lease service, etcd, Redis, Redlock,
 PostgreSQL and ZooKeeper locks), RunExclusive and the gateway's gRPC
 stubs, for workers built with find_package(fencegate).")

include(CPack)
cpack_add_component_group(fencegate)
cpack_add_component_group(fencegate-client-dev)
cpack_add_component(server GROUP fencegate)
cpack_add_component(service GROUP fencegate)
cpack_add_component(docs GROUP fencegate)
cpack_add_component(client GROUP fencegate-client-dev)
