#!/usr/bin/env bash
# The device check: one command that, on a machine with a GPU, runs the CUDA
# backend's tests and then bench/gpu/check.py (each policy trained on the GPU
# beside the simulator's prediction and beside PyTorch's memory options, one
# table; the results, runs and traces in OUT). With --dry-run it runs the same
# logic on the CPU at a tiny size, which is what CI checks.
#
#   bench/gpu/check.sh OUT [--dry-run]
#
# Environment: SPILLWAY_BUILD, the build folder with src/cli/spillway and the
# CUDA tests (default build/ci); PYTHON, the Python with PyTorch (default:
# python3 on the GPU machine, /usr/bin/python3, Debian's, for the dry run).
set -euo pipefail
cd "$(dirname "$0")/../.."

usage() {
  echo "usage: bench/gpu/check.sh OUT [--dry-run]" >&2
  exit 2
}
out=""
dry_run=0
for arg in "$@"; do
  case "$arg" in
    --dry-run) dry_run=1 ;;
    -h | --help)
      sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    -*) usage ;;
    *) [[ -z "$out" ]] || usage; out="$arg" ;;
  esac
done
[[ -n "$out" ]] || usage

build="${SPILLWAY_BUILD:-build/ci}"
binary="$build/src/cli/spillway"
if [[ ! -x "$binary" ]]; then
  echo "check.sh: no spillway binary at $binary (build it, or set SPILLWAY_BUILD)" >&2
  exit 2
fi
if ((dry_run)); then
  python="${PYTHON:-$([[ -x /usr/bin/python3 ]] && echo /usr/bin/python3 || echo python3)}"
else
  python="${PYTHON:-python3}"
fi
mkdir -p "$out"

# The CUDA backend's tests: on a GPU they run the element-wise kernels, the
# streams and the copies against the reference; without one they skip,
# saying why.
cuda_test="$build/src/backends/cuda/cuda_test"
if [[ -x "$cuda_test" ]]; then
  echo "check: CUDA tests ($cuda_test), log in $out/cuda_test.log"
  if ! "$cuda_test" > "$out/cuda_test.log" 2>&1; then
    tail -20 "$out/cuda_test.log" >&2
    echo "check.sh: the CUDA tests failed (the runs below go on)" >&2
  fi
  grep -E '^\[  (PASSED|SKIPPED|FAILED)  ?\] [0-9]+ tests?|^\[  FAILED  \] [A-Za-z]' "$out/cuda_test.log" || true
else
  echo "check: no CUDA tests in $build (built without the CUDA toolkit)" | tee "$out/cuda_test.log"
fi

args=("$out" --binary "$binary" --python "$python")
((dry_run)) && args+=(--dry-run)
exec python3 bench/gpu/check.py "${args[@]}"
