#!/usr/bin/env bash
# Installs what is missing, builds Spillway and runs the whole test suite.
#   scripts/test.sh                 Release build, warnings as errors
#   scripts/test.sh --preset asan   the same suite under AddressSanitizer + UBSan
#   scripts/test.sh --preset tsan   under ThreadSanitizer
set -euo pipefail
cd "$(dirname "$0")/.."

preset=ci
while [ $# -gt 0 ]; do
  case "$1" in
    --preset) preset="$2"; shift 2 ;;
    --preset=*) preset="${1#*=}"; shift ;;
    -h|--help) sed -n '2,5p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done

scripts/install-deps.sh
jobs=$(nproc)
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$jobs"
ctest --preset "$preset" -j "$jobs"
