#!/usr/bin/env bash
# Installs what is missing, then runs the checks in stages:
#
#   suite     g++ Debug build with sync points, the suite (CTest): every
#             test but those labelled slow, or every test with --all
#   asan      clang build with AddressSanitizer + UndefinedBehaviorSanitizer,
#             -Wthread-safety -Werror and the libFuzzer targets; the whole
#             suite under the sanitizers, then each fuzzer for a bounded time
#   tsan      clang ThreadSanitizer build of the concurrency suites (CTest
#             label "concurrency")
#   tidy      clang-tidy on the C++ files changed since FENCEGATE_TIDY_BASE
#             (default: the previous commit)
#
# Usage: bash scripts/test.sh [--all] [extra ctest args for the suite stage]
# Without --all only the suite runs (the everyday command); --all runs the
# four stages, as CI does (.ci/run). FENCEGATE_TEST_STAGES="suite tidy"
# picks stages by name. FENCEGATE_FUZZ_SECONDS sets each fuzzer's run
# (default 20).
set -euo pipefail
cd "$(dirname "$0")/.."

DEFAULT_STAGES=suite
ALL=0
if [[ "${1:-}" == "--all" ]]; then
  DEFAULT_STAGES="suite asan tsan tidy"
  ALL=1
  shift
fi
STAGES=${FENCEGATE_TEST_STAGES:-$DEFAULT_STAGES}
JOBS=$(nproc)
has_stage() { [[ " $STAGES " == *" $1 "* ]]; }
banner() { echo; echo "=== test.sh: $* ($(date -u +%H:%M:%S))"; }

bash scripts/setup.sh

if has_stage suite; then
  banner "suite: g++ build"
  BUILD_DIR=${FENCEGATE_TEST_BUILD_DIR:-build-test}
  # The everyday run leaves out the tests labelled slow (the harness's
  # safety and chaos runs, the install consumer, the packages) and so the
  # harness itself; --all builds and runs them. Line tables only (-g1: a
  # backtrace keeps its lines) and gold make the build a third shorter
  # (docs/testing.md).
  SLOW=(-LE slow)
  BENCH=OFF
  if [[ $ALL == 1 ]]; then SLOW=(); BENCH=ON; fi
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_CXX_FLAGS_DEBUG=-g1 \
    -DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=gold \
    -DCMAKE_SHARED_LINKER_FLAGS=-fuse-ld=gold \
    -DFENCEGATE_BUILD_TESTS=ON -DFENCEGATE_BUILD_BENCH=$BENCH \
    -DFENCEGATE_SYNC_POINTS=ON -DFENCEGATE_WERROR=ON
  cmake --build "$BUILD_DIR" -j"$JOBS"
  banner "suite: ctest ${SLOW[*]}"
  (cd "$BUILD_DIR" && ctest --output-on-failure -j"$JOBS" "${SLOW[@]}" "$@")
fi

if has_stage asan; then
  banner "asan: clang build (ASan + UBSan, -Wthread-safety, fuzzers)"
  CC=clang CXX=clang++ cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug \
    -DFENCEGATE_BUILD_TESTS=ON -DFENCEGATE_BUILD_BENCH=ON -DFENCEGATE_SYNC_POINTS=ON \
    -DFENCEGATE_WERROR=ON -DFENCEGATE_SANITIZE=address,undefined -DFENCEGATE_FUZZ=ON
  cmake --build build-asan -j"$JOBS"
  banner "asan: ctest under the sanitizers"
  # Reports fail the test that triggered them; child gateways inherit this.
  export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan.supp}
  # The slow harness runs (safety, chaos, the install consumer) are left
  # to the suite stage: under the sanitizers the chaos run's workers are too
  # slow to be sure each lock source holds once, and libpqxx 6.4 leaks on
  # the connections that PostgreSQL's restart breaks (docs/testing.md).
  (cd build-asan && ctest --output-on-failure -j"$JOBS" -LE slow)
  banner "asan: fuzzers"
  bash scripts/fuzz.sh build-asan "${FENCEGATE_FUZZ_SECONDS:-20}"
fi

if has_stage tsan; then
  banner "tsan: clang ThreadSanitizer build of the concurrency suites"
  CC=clang CXX=clang++ cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug \
    -DFENCEGATE_BUILD_TESTS=ON -DFENCEGATE_SYNC_POINTS=ON -DFENCEGATE_WERROR=ON \
    -DFENCEGATE_SANITIZE=thread
  cmake --build build-tsan -j"$JOBS" --target tsan_tests
  banner "tsan: ctest -L concurrency"
  export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp}
  (cd build-tsan && ctest --output-on-failure -j"$JOBS" -L concurrency)
fi

if has_stage tidy; then
  banner "tidy: clang-tidy on changed files"
  bash scripts/tidy.sh
fi
banner "all stages passed: $STAGES"
