#!/usr/bin/env bash
# Builds the fuzzers (fuzz preset: clang, libFuzzer, ASan + UBSan), then
#   scripts/fuzz.sh                       runs every input of each fuzzer's corpus through it once (CI)
#   scripts/fuzz.sh --seconds 1200        fuzzes the ONNX importer that long from its corpus, at the
#                                         lowest priority; new inputs go to build/fuzz/corpus/<target>,
#                                         findings to build/fuzz/findings/
#   scripts/fuzz.sh --seconds 600 --target checkpoint   the same for another reader:
#                                         onnx_import, npy, hardware_profile, checkpoint or node_link
# docs/fuzzing.md says how to minimize a finding and merge new inputs into the corpus.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=0
target=onnx_import
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --seconds=*) seconds="${1#*=}"; shift ;;
    --target) target="$2"; shift 2 ;;
    --target=*) target="${1#*=}"; shift ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "fuzz.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done

# Each fuzzer, its binary and its corpus in the repository.
declare -A binaries=(
  [onnx_import]=build/fuzz/src/onnx/fuzz/onnx_import_fuzzer
  [npy]=build/fuzz/src/fuzz/npy_fuzzer
  [hardware_profile]=build/fuzz/src/fuzz/hardware_profile_fuzzer
  [checkpoint]=build/fuzz/src/fuzz/checkpoint_fuzzer
  [node_link]=build/fuzz/src/fuzz/node_link_fuzzer
)
declare -A corpora=(
  [onnx_import]=src/onnx/fuzz/corpus
  [npy]=src/fuzz/corpus/npy
  [hardware_profile]=src/fuzz/corpus/hardware_profile
  [checkpoint]=src/fuzz/corpus/checkpoint
  [node_link]=src/fuzz/corpus/node_link
)
if [ -z "${binaries[$target]+set}" ]; then
  echo "fuzz.sh: --target takes onnx_import, npy, hardware_profile, checkpoint or node_link, not '$target'" >&2
  exit 2
fi

scripts/install-deps.sh
cmake --preset fuzz >/dev/null

if [ "$seconds" -eq 0 ]; then
  targets=()
  for name in "${!binaries[@]}"; do targets+=("$(basename "${binaries[$name]}")"); done
  cmake --build --preset fuzz -j "$(nproc)" --target "${targets[@]}"
  for name in onnx_import npy hardware_profile checkpoint node_link; do
    echo "fuzz.sh: $name over ${corpora[$name]}"
    "${binaries[$name]}" -runs=0 "${corpora[$name]}"
  done
else
  cmake --build --preset fuzz -j "$(nproc)" --target "$(basename "${binaries[$target]}")"
  mkdir -p "build/fuzz/corpus/$target" build/fuzz/findings
  # New inputs land in the first corpus directory; the repository's stays as it is.
  nice -n 19 "${binaries[$target]}" -max_total_time="$seconds" -max_len=65536 -timeout=10 \
    -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="build/fuzz/findings/$target-" \
    "build/fuzz/corpus/$target" "${corpora[$target]}"
fi
