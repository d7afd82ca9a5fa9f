#!/usr/bin/env bash
# Runs every libFuzzer target of a FENCEGATE_FUZZ=ON build for a bounded
# time, starting from its committed seed corpus (tests/fuzz/corpus/<name>),
# and prints the executions each ran. A crash, leak or failed check fails the
# script and leaves the input under <build>/fuzz-runs/<name>/ (crash-*); add
# it to the seed corpus and a regression test with the fix.
# Usage: bash scripts/fuzz.sh BUILD_DIR [SECONDS_PER_TARGET]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(cd "${1:?usage: fuzz.sh BUILD_DIR [SECONDS]}" && pwd)
ROOT=$PWD
SECONDS_PER_TARGET=${2:-20}
TARGETS=(write_request fence_lease_request file_path adapter_uri config policy
  pgwire_message)
# Scratch state (fence stores, file roots) of the targets, off the disk.
if [ -n "${FENCEGATE_FUZZ_TMPDIR:-}" ]; then
  export TMPDIR=$FENCEGATE_FUZZ_TMPDIR
elif [ -d /dev/shm ] && [ -w /dev/shm ]; then
  export TMPDIR=/dev/shm
fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

failed=0
printf "%-22s %12s %10s %s\n" target executions exec/s result
for t in "${TARGETS[@]}"; do
  bin="$BUILD/tests/fuzz/${t}_fuzzer"
  runs="$BUILD/fuzz-runs/$t"
  rm -rf "$runs" && mkdir -p "$runs/corpus"
  log="$runs/log.txt"
  if (cd "$runs" && "$bin" -max_total_time="$SECONDS_PER_TARGET" \
        -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        corpus "$ROOT/tests/fuzz/corpus/$t") >"$log" 2>&1; then
    result=ok
  else
    result="FAILED (see $log)"
    failed=1
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  printf "%-22s %12s %10s %s\n" "$t" "${execs:-?}" "${rate:-?}" "$result"
  if [ "$result" != ok ]; then tail -40 "$log"; fi
done
exit $failed
