#!/bin/bash
# Installs the client library from the build tree into a temporary prefix,
# builds tests/consumer against it with find_package(fencegate), and runs
# the worker twice against a real gateway: each run writes through the
# gateway with a rising token. The worker must not link RocksDB.
#
#   install_consumer_test.sh BUILD_DIR SOURCE_DIR FENCEGATE_BINARY \
#       [CXX_COMPILER [FLAGS]]
# CXX_COMPILER and FLAGS are the build's, so that a sanitized or fuzzing
# build's libraries link into the worker.
set -euo pipefail
build_dir=$1 source_dir=$2 gateway_bin=$3
cxx=${4:-} flags=${5:-}
work=$(mktemp -d)
gateway_pid=
cleanup() {
  if [[ -n $gateway_pid ]]; then kill "$gateway_pid" 2>/dev/null || true; wait "$gateway_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cmake --install "$build_dir" --prefix "$work/prefix" --component client >/dev/null
# The library directory is lib or lib/<multiarch>, as GNUInstallDirs chose.
[[ -n $(find "$work/prefix" -name fencegateConfig.cmake) ]] || fail "no package config installed"
libraries=$(find "$work/prefix" -name 'libfencegate_*.a')
[[ -n $libraries ]] || fail "no client library installed"
# Every header under include/fencegate/, included as "fencegate/...".
[[ $(ls "$work/prefix/include") == fencegate ]] || fail "headers outside include/fencegate: $(ls "$work/prefix/include")"
[[ -f $work/prefix/include/fencegate/client/token_source.h && -f $work/prefix/include/fencegate/v1/gateway.pb.h ]] \
  || fail "headers not at include/fencegate/client/ and include/fencegate/v1/"
if find "$work/prefix/include" -name sync_point.h | grep -q .; then fail "the tests' sync points were installed"; fi
# Only headers whose library is installed: the server's own are not.
for h in sync_point.h setting_value.h flag_args.h memory_budget.h periodic_thread.h thread_name.h named_thread_pool.h; do
  if find "$work/prefix/include" -name "$h" | grep -q .; then fail "$h was installed without its library"; fi
done
if grep -E 'fencing|gateway|storage_adapters|token_watchers|metrics' <<<"$libraries"; then
  fail "server libraries were installed with the client"
fi

cmake -S "$source_dir/tests/consumer" -B "$work/build" \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release \
  ${cxx:+-DCMAKE_CXX_COMPILER="$cxx"} \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" >/dev/null
cmake --build "$work/build" -j2 >/dev/null
worker=$work/build/worker
if ldd "$worker" | grep -i rocksdb; then fail "the worker links RocksDB"; fi

"$gateway_bin" --listen=127.0.0.1:0 --data_dir="$work/data" \
  --port_file="$work/port" 2>"$work/gateway.log" &
gateway_pid=$!
for _ in $(seq 1 300); do [[ -s $work/port ]] && break; sleep 0.1; done
[[ -s $work/port ]] || fail "gateway did not start: $(cat "$work/gateway.log")"
address=127.0.0.1:$(cat "$work/port")

first=$("$worker" "$address" first) || fail "first run"
second=$("$worker" "$address" second) || fail "second run"
(( second > first )) || fail "tokens did not rise: $first then $second"
[[ $(cat "$work/data/files/consumer.txt") == second ]] || fail "file holds $(cat "$work/data/files/consumer.txt")"
echo "ok: tokens $first then $second"
