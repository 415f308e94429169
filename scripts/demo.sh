#!/usr/bin/env bash
# Installs what is missing, builds Spillway (Release) and runs the main job:
# every policy on the paper's first workload (ResNet-50 at 8000x8000, batch 1)
# on the paper's machine (V100 16 GB, NVLink 2.0), side by side, and hybrid's
# step at budgets from 10 to 15 GiB there; then a short real training run on
# this machine's CPU under a budget below what `none` needs. Extra arguments
# go to `spillway compare` (e.g. --hardware h200-141g-pcie5).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target spillway
bin=build/release/src/cli/spillway

echo "== spillway inspect --model resnet50 --image 8000 --batch 1"
"$bin" inspect --model resnet50 --image 8000 --batch 1
echo
echo "== spillway compare --model resnet50 --image 8000 --batch 1 --hardware v100-16g-nvlink2 $*"
"$bin" compare --model resnet50 --image 8000 --batch 1 --hardware v100-16g-nvlink2 "$@"

# What each amount of memory costs on that machine: hybrid from 10 GiB (just
# above the least it needs) to 15 GiB, each budget also refining the plan of
# the one below, with the curve as an SVG plot.
sweep=(--model resnet50 --image 8000 --batch 1 --hardware v100-16g-nvlink2
       --budgets 10GiB,11GiB,12GiB,13GiB,14GiB,15GiB --plot build/release/sweep.svg)
echo
echo "== spillway sweep ${sweep[*]}"
"$bin" sweep "${sweep[@]}"

# A real run on this machine's CPU: a small ResNet-18 trained on synthetic
# images under a budget well below the arena `none` needs (9.6 MiB): the
# hybrid plan spills to fit in 7 MiB and the loss falls all the same.
train_workload=(--model resnet18 --image 128 --base-width 8 --batch 8 --classes 4)
echo
echo "== spillway plan ${train_workload[*]} --hardware cpu --policy none"
"$bin" plan "${train_workload[@]}" --hardware cpu --policy none
echo
echo "== spillway train ${train_workload[*]} --budget 7MiB --policy hybrid --steps 30"
"$bin" train "${train_workload[@]}" --budget 7MiB --policy hybrid --steps 30 --log-every 5
