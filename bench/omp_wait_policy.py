#!/usr/bin/python3
"""What OpenMP's wait policy costs the CPU backend inside Python, on an idle
and on a busy machine.

Trains the same small model from the Python module in fresh interpreters with
libgomp's default wait policy (idle threads spin for a while after each
parallel region, then sleep; got by loading libgomp before spillway, as
`import torch` first would, so that spillway leaves it alone), PASSIVE (what
`import spillway` sets when it still can) and ACTIVE, first with nothing else running, then with one busy process per
core (plain Python loops) competing for the cores. Runs alternate between the
policies so that drift in the machine's speed falls on all of them alike; the
table gives the median step time and its ratio to PASSIVE's. Checksums must
agree: the policy changes only speed.

Usage: bench/omp_wait_policy.py BUILD_DIR [--rounds 5] [--steps 15]
(BUILD_DIR/python holds the spillway package.)
"""

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys

POLICIES = [None, "PASSIVE", "ACTIVE"]
TRAIN = """
import ctypes, json
if {preload}:
    ctypes.CDLL("libgomp.so.1")  # loaded before spillway: libgomp's default stays
import spillway
run = spillway.train(spillway.Workload(model="resnet18", image=64, batch=8), steps={steps},
                     policy="none", threads={threads})
times = run.step_seconds[2:]  # the first steps warm the caches and oneDNN's kernels
print(json.dumps({{"policy": spillway.WAIT_POLICY, "step": sorted(times)[len(times) // 2],
                  "checksum": run.checksum}}))
"""


def spin():
    while True:
        pass


def run_once(build, policy, steps, threads):
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if policy is not None:
        env["OMP_WAIT_POLICY"] = policy
    env["PYTHONPATH"] = os.path.join(build, "python")
    script = TRAIN.format(steps=steps, threads=threads, preload=policy is None)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                          check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    expected = "libgomp's default" if policy is None else policy
    assert result["policy"].startswith(expected), (policy, result["policy"])
    return result


def measure(build, rounds, steps, threads):
    results = {policy: [] for policy in POLICIES}
    checksums = set()
    for _ in range(rounds):
        for policy in POLICIES:
            result = run_once(build, policy, steps, threads)
            results[policy].append(result["step"])
            checksums.add(result["checksum"])
    assert len(checksums) == 1, f"the wait policy changed the result: {checksums}"
    return {policy: statistics.median(times) for policy, times in results.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("build")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=15)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    rows = []
    for load in ("idle", "busy"):
        spinners = []
        if load == "busy":
            spinners = [multiprocessing.Process(target=spin, daemon=True) for _ in range(cores)]
            for process in spinners:
                process.start()
        try:
            medians = measure(args.build, args.rounds, args.steps, threads=cores)
        finally:
            for process in spinners:
                process.terminate()
        for policy in POLICIES:
            rows.append((load, policy or "libgomp's default", medians[policy],
                         medians[policy] / medians["PASSIVE"]))
    print(f"ResNet-18 64x64 batch 8, policy none, {cores} threads on {cores} cores; "
          f"median step of {args.rounds} interpreters per cell\n")
    print("| machine | OMP_WAIT_POLICY | step (s) | vs PASSIVE |")
    print("|---|---|---|---|")
    for load, policy, step, ratio in rows:
        print(f"| {load} | {policy} | {step:.4f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
