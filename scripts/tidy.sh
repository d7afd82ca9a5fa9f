#!/usr/bin/env bash
# clang-tidy (checks in .clang-tidy, every warning an error) on the C++
# sources changed since FENCEGATE_TIDY_BASE (default: the previous commit),
# using the compile commands of build-asan (clang), else build-test.
# Usage: bash scripts/tidy.sh [FILES...]   (no files: the changed ones)
set -euo pipefail
cd "$(dirname "$0")/.."
DB=build-asan
[ -f "$DB/compile_commands.json" ] || DB=build-test
[ -f "$DB/compile_commands.json" ] || { echo "tidy: no compile_commands.json; build first"; exit 1; }

if [ $# -gt 0 ]; then
  files=("$@")
else
  BASE=${FENCEGATE_TIDY_BASE:-HEAD~1}
  if ! git rev-parse -q --verify "$BASE^{commit}" >/dev/null; then
    echo "tidy: base $BASE not found; checking nothing"; exit 0
  fi
  mapfile -t files < <(git diff --name-only --diff-filter=d "$BASE" -- '*.cc' \
    | grep -v '^tests/fuzz/corpus/' || true)
fi
# Only files the build compiles have compile commands.
checked=()
for f in "${files[@]}"; do
  grep -q "\"file\": \"$PWD/$f\"" "$DB/compile_commands.json" && checked+=("$f")
done
if [ ${#checked[@]} -eq 0 ]; then echo "tidy: no changed C++ sources"; exit 0; fi
echo "tidy: ${#checked[@]} file(s) against $DB: ${checked[*]}"
printf '%s\n' "${checked[@]}" | xargs -P"$(nproc)" -n1 \
  clang-tidy -p "$DB" --quiet --warnings-as-errors='*'
