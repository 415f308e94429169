#!/usr/bin/env bash
# Runs the CPU backend under valgrind's memcheck, failing on any error:
# AddressSanitizer cannot see the writes of oneDNN's JIT-generated kernels,
# memcheck can. Uses the Release (ci preset) build of cpu_test and train_test.
#   scripts/valgrind.sh                  the CPU op harness and the OddChannels training steps,
#                                        then the op harness again with oneDNN at SSE4.1
#   scripts/valgrind.sh --filter GLOB    other tests of those binaries (a gtest filter)
# valgrind does not execute AVX-512, so oneDNN is restricted to AVX2 (the path
# where its strided 1x1 weight gradient once overran its buffer); OpenMP waits
# passively, since spinning threads crawl when valgrind runs one thread at a time.
set -euo pipefail
cd "$(dirname "$0")/.."

filter=""
while [ $# -gt 0 ]; do
  case "$1" in
    --filter) filter="$2"; shift 2 ;;
    --filter=*) filter="${1#*=}"; shift ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "valgrind.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done

scripts/install-deps.sh
cmake --preset ci >/dev/null
cmake --build --preset ci -j "$(nproc)" --target cpu_test train_test

export ONEDNN_MAX_CPU_ISA=AVX2 OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=1
# Redzones of 256 bytes: a kernel that overruns its buffer by a few vectors
# lands in a redzone (an error) rather than in the next block, where it would
# corrupt the heap and, as once seen, hang the run. A run that hangs anyway
# is stopped after 20 minutes and fails. At most 25 guest instructions per
# translated block (the default is 50): oneDNN's JIT kernels are long runs of
# vector instructions, whose translation otherwise exhausts VEX's temporary
# storage ("VEX temporary storage exhausted", valgrind aborts).
memcheck=(timeout 1200 valgrind --tool=memcheck --error-exitcode=99 --errors-for-leak-kinds=none
          --redzone-size=256 --vex-guest-max-insns=25 -q)

run() {
  local binary="$1" tests="$2"
  echo "valgrind.sh: $binary --gtest_filter=$tests"
  "${memcheck[@]}" "$binary" --gtest_filter="$tests" --gtest_brief=1
}

if [ -n "$filter" ]; then
  run build/ci/src/backends/cpu/cpu_test "$filter"
  run build/ci/src/train/train_test "$filter"
else
  run build/ci/src/backends/cpu/cpu_test '*'
  run build/ci/src/train/train_test 'Models/OddChannels.*'
  # oneDNN's SSE4.1 kernels and the generic direct kernels: the op harness again.
  ONEDNN_MAX_CPU_ISA=SSE41 run build/ci/src/backends/cpu/cpu_test '*'
fi
