#!/usr/bin/env bash
# Installs what is missing, builds Spillway and runs the test suite.
#   scripts/test.sh                               Release build, warnings as errors, every test
#   scripts/test.sh --preset asan                 the same suite under AddressSanitizer + UBSan
#   scripts/test.sh --preset tsan --only runtime  some stages' tests (ctest labels, comma-separated);
#                                                 only their test binaries and what they link are built
#   scripts/test.sh --only cpu,train --isa avx2   with the CPU backend restricted to an instruction
#                                                 set: avx2, or sse41 (the generic direct kernels)
set -euo pipefail
cd "$(dirname "$0")/.."

preset=ci
only=""
isa=""
while [ $# -gt 0 ]; do
  case "$1" in
    --preset) preset="$2"; shift 2 ;;
    --preset=*) preset="${1#*=}"; shift ;;
    --only) only="$2"; shift 2 ;;
    --only=*) only="${1#*=}"; shift ;;
    --isa) isa="$2"; shift 2 ;;
    --isa=*) isa="${1#*=}"; shift ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
case "$isa" in
  "") ;;
  avx2) export ONEDNN_MAX_CPU_ISA=AVX2 ;;
  sse41) export ONEDNN_MAX_CPU_ISA=SSE41 ;;
  *) echo "test.sh: --isa takes avx2 or sse41, not '$isa'" >&2; exit 2 ;;
esac

scripts/install-deps.sh
jobs=$(nproc)
cmake --preset "$preset" >/dev/null
if [ -n "$only" ]; then
  # Each stage's test binary is <label>_test and its tests carry the label.
  IFS=, read -r -a labels <<<"$only"
  targets=()
  for label in "${labels[@]}"; do targets+=("${label}_test"); done
  cmake --build --preset "$preset" -j "$jobs" --target "${targets[@]}"
  pattern="^($(IFS='|'; echo "${labels[*]}"))\$"
  ctest --preset "$preset" -j "$jobs" -L "$pattern"
else
  cmake --build --preset "$preset" -j "$jobs"
  ctest --preset "$preset" -j "$jobs"
fi
