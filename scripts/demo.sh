#!/usr/bin/env bash
# Installs what is missing, builds Spillway (Release) and runs the main job on
# the built-in default workload. Extra arguments go to `spillway inspect`.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target spillway
bin=build/release/src/cli/spillway

echo "== spillway inspect --model resnet50 --image 224 --batch 1"
"$bin" inspect --model resnet50 --image 224 --batch 1 "$@"
echo
echo "== spillway inspect --model resnet50 --image 8000 --batch 1 (the paper's first workload)"
"$bin" inspect --model resnet50 --image 8000 --batch 1 "$@"
