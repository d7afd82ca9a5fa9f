#!/usr/bin/env bash
# Installs what is missing, builds fencegate with its tests, and runs the
# whole suite with CTest. Usage: bash scripts/test.sh [extra ctest args]
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
BUILD_DIR=${FENCEGATE_TEST_BUILD_DIR:-build-test}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Debug \
  -DFENCEGATE_BUILD_TESTS=ON -DFENCEGATE_BUILD_BENCH=ON -DFENCEGATE_SYNC_POINTS=ON \
  -DFENCEGATE_WERROR=ON
cmake --build "$BUILD_DIR" -j"$(nproc)"
cd "$BUILD_DIR"
ctest --output-on-failure -j"$(nproc)" "$@"
