#!/usr/bin/env bash
# Builds the ONNX import fuzzer (fuzz preset: clang, libFuzzer, ASan + UBSan), then
#   scripts/fuzz.sh                  runs every input of src/onnx/fuzz/corpus through it once (CI)
#   scripts/fuzz.sh --seconds 1200   fuzzes that long from that corpus, at the lowest priority;
#                                    new inputs go to build/fuzz/corpus, findings to build/fuzz/findings/
# docs/fuzzing.md says how to minimize a finding and merge new inputs into the corpus.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=0
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --seconds=*) seconds="${1#*=}"; shift ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "fuzz.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done

scripts/install-deps.sh
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$(nproc)" --target onnx_import_fuzzer
fuzzer=build/fuzz/src/onnx/fuzz/onnx_import_fuzzer
corpus=src/onnx/fuzz/corpus

if [ "$seconds" -eq 0 ]; then
  "$fuzzer" -runs=0 "$corpus"
else
  mkdir -p build/fuzz/corpus build/fuzz/findings
  # New inputs land in the first corpus directory; the repository's stays as it is.
  nice -n 19 "$fuzzer" -max_total_time="$seconds" -max_len=65536 -timeout=10 \
    -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix=build/fuzz/findings/ \
    build/fuzz/corpus "$corpus"
fi
