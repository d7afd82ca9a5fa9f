#!/usr/bin/env bash
# Installs what is missing, builds fencegate, starts it on its embedded
# default (127.0.0.1:7070, ./fencegate-data) in the background, and shows a
# stale write being rejected; then the same with psql through the gateway's
# PostgreSQL port (scripts/demo_pg.sh, with a throwaway PostgreSQL). Stop it with: kill "$(cat fencegate-data/fencegate.pid)"
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DFENCEGATE_BUILD_TESTS=OFF >/dev/null
cmake --build build -j"$(nproc)"

mkdir -p fencegate-data
if [ -f fencegate-data/fencegate.pid ] && kill -0 "$(cat fencegate-data/fencegate.pid)" 2>/dev/null; then
  echo "demo: stopping the gateway started earlier"
  kill "$(cat fencegate-data/fencegate.pid)"
  while kill -0 "$(cat fencegate-data/fencegate.pid)" 2>/dev/null; do sleep 0.1; done
fi
rm -f fencegate-data/port
./build/gateway/fencegate --port_file=fencegate-data/port >>fencegate-data/fencegate.log 2>&1 &
echo $! > fencegate-data/fencegate.pid
for _ in $(seq 100); do [ -s fencegate-data/port ] && break; sleep 0.1; done
if [ ! -s fencegate-data/port ]; then
  echo "demo: the gateway did not start; see fencegate-data/fencegate.log" >&2
  tail -n 5 fencegate-data/fencegate.log >&2
  exit 1
fi
echo "demo: fencegate is serving on 127.0.0.1:$(cat fencegate-data/port) (pid $(cat fencegate-data/fencegate.pid))"

ctl=./build/tools/fencectl/fencectl
# Tokens start above whatever an earlier run of the demo left in the fence.
base=$(( $($ctl get --domain demo-job | sed 's/.*highest_token=//') + 1 ))
old=$base new=$((base + 1))
set -x
$ctl write --domain demo-job --token "$old" --resource files/demo/report.txt --put "written by holder $old"
$ctl fence --domain demo-job --token "$new"
set +e
$ctl write --domain demo-job --token "$old" --resource files/demo/report.txt --put "late write by holder $old"
rc=$?
set -e +x
echo "demo: the late write exited with code $rc (3 = stale token); the file still says:"
cat fencegate-data/files/demo/report.txt; echo
# The same with psql, through the gateway's PostgreSQL port.
BUILD=build bash scripts/demo_pg.sh
echo "demo: the gateway keeps running; stop it with: kill \$(cat fencegate-data/fencegate.pid)"
[ "$rc" -eq 3 ]
