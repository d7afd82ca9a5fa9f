#!/usr/bin/env bash
# Installs fencegate's build and test dependencies from Debian 12 packages,
# only when some are missing. Run as root (or with sudo available).
set -euo pipefail

PACKAGES=(
  cmake g++ make pkg-config
  protobuf-compiler libprotobuf-dev
  libgrpc++-dev protobuf-compiler-grpc grpc-proto
  libabsl-dev librocksdb-dev libboost-dev
  libgtest-dev libgmock-dev
  libpq-dev libpqxx-dev postgresql pgbouncer
  etcd-server etcd-client
  openssl
  libhiredis-dev redis-server
  libzookeeper-mt-dev zookeeper
  prometheus-cpp-dev
  clang clang-tidy libclang-rt-14-dev libfuzzer-14-dev git
  libpg-query-dev libcli11-dev python3-psycopg
  libsystemd-dev systemd logrotate dpkg-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
