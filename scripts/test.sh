#!/usr/bin/env bash
# Installs what is missing, builds Spillway and runs the test suite.
#   scripts/test.sh                             Release build, warnings as errors, every test
#   scripts/test.sh --preset asan               the same suite under AddressSanitizer + UBSan
#   scripts/test.sh --preset tsan --only runtime   one stage's tests (its ctest label) under ThreadSanitizer
set -euo pipefail
cd "$(dirname "$0")/.."

preset=ci
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --preset) preset="$2"; shift 2 ;;
    --preset=*) preset="${1#*=}"; shift ;;
    --only) only="$2"; shift 2 ;;
    --only=*) only="${1#*=}"; shift ;;
    -h|--help) sed -n '2,5p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done

scripts/install-deps.sh
jobs=$(nproc)
cmake --preset "$preset" >/dev/null
if [ -n "$only" ]; then
  # Each stage's test binary is <label>_test and its tests carry the label.
  cmake --build --preset "$preset" -j "$jobs" --target "${only}_test"
  ctest --preset "$preset" -j "$jobs" -L "^${only}\$"
else
  cmake --build --preset "$preset" -j "$jobs"
  ctest --preset "$preset" -j "$jobs"
fi
