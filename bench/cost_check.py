#!/usr/bin/env python3
"""Predicted against measured step time on the CPU backend, with measured costs and with the roofline.

For each workload this profiles the training step (`spillway profile`), then
for each policy at two budgets between the smallest arena `hybrid` reaches
and the `none` arena (a quarter and 60% of the way: parameters, gradients and
optimizer state take most of a small model's arena, so a share of `none`'s
would fit no plan) trains a few steps twice: planned with the costs file (`train --costs`) and planned with
the `cpu` profile's roofline. Each run reports the simulator's prediction for
its plan (`predicted_step_s`) and the measured step (the median of the steps
after the first). With --repeats N each workload is profiled and run N times,
in rounds (each round profiles, then runs every policy at both budgets with
both cost models once), and each row keeps the round whose error is the
median: on a machine whose speed drifts, a prediction is then compared with
runs made just after its profile, and one slow moment moves one round. All
rows run in one session, side by side, so the machine's load affects both
columns alike; the figures are measured here, not on a GPU. Writes a table
into docs/results.md, or prints it with --print.

  bench/cost_check.py [--binary build/release/src/cli/spillway] [--print] [--steps 4]
                      [--repeats 1] [--only SUBSTRING]
"""
import argparse
import datetime
import json
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile

from results_doc import write_section

ROOT = pathlib.Path(__file__).resolve().parent.parent
BEGIN = "<!-- cost-check:begin (bench/cost_check.py writes this part) -->"
END = "<!-- cost-check:end -->"
WORKLOADS = [
    ("ResNet-18, 128x128, batch 8", ["--model", "resnet18", "--image", "128", "--batch", "8"]),
    ("ResNet-50, 224x224, batch 4", ["--model", "resnet50", "--image", "224", "--batch", "4"]),
    ("DeepLabV3+, 256x256, batch 2",
     ["--model", "deeplabv3plus", "--image", "256", "--batch", "2"]),
    ("GPT-2, 4 layers, d 256, seq 256, batch 4",
     ["--model", "gpt2", "--layers", "4", "--d-model", "256", "--heads", "4", "--seq-len", "256",
      "--vocab", "4096", "--batch", "4"]),
]
POLICIES = ["none", "swap", "recompute", "hybrid-seed", "hybrid"]
SHARES = [0.25, 0.6]  # of the way from hybrid's smallest arena to none's


def run_json(binary, args):
    done = subprocess.run([binary, *args, "--json"], capture_output=True, text=True)
    if done.returncode != 0:
        return None, done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"
    return json.loads(done.stdout), None


def train(binary, args, policy, budget, steps, costs):
    extra = ["--costs", costs] if costs else []
    summary, error = run_json(binary, ["train", *args, "--policy", policy, "--budget", str(budget),
                                       "--steps", str(steps), *extra])
    if summary is None:
        # Only a budget the policy cannot fit is a table cell; anything else stops the run.
        if "cannot fit the step" not in error:
            sys.exit(f"train --policy {policy} --budget {budget}: {error}")
        return None
    measured = statistics.median(summary["step_seconds"][1:])
    return summary["predicted_step_s"], measured


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=str(ROOT / "build/release/src/cli/spillway"))
    parser.add_argument("--print", action="store_true", help="print instead of editing the doc")
    parser.add_argument("--steps", type=int, default=4, help="steps per run (the first is not counted)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="rounds, each a profile and then every run (odd); each row keeps the median round")
    parser.add_argument("--only", default="",
                        help="only the workloads whose name contains this (with --print)")
    options = parser.parse_args()
    if options.steps < 2 or options.repeats < 1 or options.repeats % 2 == 0:
        parser.error("--steps must be at least 2, and --repeats odd (each row keeps the "
                     "median round)")
    workloads = [(name, args) for name, args in WORKLOADS if options.only in name]
    if not workloads:
        parser.error(f"no workload's name contains '{options.only}'")
    if options.only and not options.print:
        parser.error("--only writes a partial table: use it with --print")
    lines = [
        "| workload | policy | budget (of the way from floor to `none`) | measured (s), costs plan | predicted, costs | error "
        "| measured (s), roofline plan | predicted, roofline | error |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    errors = {"costs": [], "roofline": []}
    with tempfile.TemporaryDirectory() as folder:
        for name, args in workloads:
            none, error = run_json(options.binary, ["plan", *args, "--policy", "none",
                                                    "--hardware", "cpu"])
            if none is None:
                sys.exit(f"{name}: {error}")
            arena = none["arena_bytes"]
            tightest, error = run_json(options.binary, ["plan", *args, "--policy", "hybrid",
                                                        "--hardware", "cpu", "--budget", "1"])
            if tightest is None:
                sys.exit(f"{name}: {error}")
            floor = tightest["smallest_arena_bytes"]
            budgets = [(share, int(floor + share * (arena - floor))) for share in SHARES]
            # (share, policy, cost model) -> one (predicted, measured) per round, or None
            results = {}
            for round_index in range(options.repeats):
                # Each round plans with a profile taken just before its runs.
                costs = str(pathlib.Path(folder) / f"costs_{round_index}.json")
                print(f"{name}: profiling, round {round_index + 1} of {options.repeats}",
                      file=sys.stderr)
                subprocess.run([options.binary, "profile", *args, "--out", costs], check=True,
                               capture_output=True)
                for share, budget in budgets:
                    for policy in POLICIES:
                        for key, costs_file in (("costs", costs), ("roofline", None)):
                            print(f"{name}: {policy} at {share:.0%}, {key}, round "
                                  f"{round_index + 1} of {options.repeats}", file=sys.stderr)
                            results.setdefault((share, policy, key), []).append(
                                train(options.binary, args, policy, budget, options.steps,
                                      costs_file))
            for share, budget in budgets:
                for policy in POLICIES:
                    cells = []
                    for key in ("costs", "roofline"):
                        rounds = [run for run in results[(share, policy, key)] if run]
                        if not rounds:
                            cells += ["infeasible", "-", "-"]
                            continue
                        # The round whose error is the median (an odd count): a
                        # prediction and a measurement made together, not medians
                        # of different rounds.
                        rounds.sort(key=lambda run: run[0] / run[1])
                        predicted, measured = rounds[(len(rounds) - 1) // 2]
                        error_pct = 100 * (predicted / measured - 1)
                        errors[key].append(abs(error_pct))
                        cells += [f"{measured:.4f}", f"{predicted:.4f}", f"{error_pct:+.1f}%"]
                    lines.append(" | ".join([f"| {name}", policy,
                                             f"{budget / 2**20:.0f} MiB ({share:.0%})", *cells]) + " |")
    summary = []
    for key in ("costs", "roofline"):
        values = errors[key]
        if values:
            summary.append(f"{key}: mean absolute error {statistics.mean(values):.1f}% over "
                           f"{len(values)} runs, {sum(v <= 10 for v in values)} within 10%")
    today = datetime.date.today().isoformat()
    section = "\n".join([
        BEGIN,
        f"Generated {today} by `bench/cost_check.py` on {platform.node()} "
        f"({platform.machine()}, {platform.system()}), CPU backend, {options.steps} steps a run "
        f"(the first not counted), {options.repeats} round(s) of every run, each after its own "
        "profile (the round with the median error kept), measured and predicted in the same "
        "session. "
        + "; ".join(summary) + ".",
        "",
        *lines,
        END,
    ])
    if options.print:
        print(section)
        return
    write_section(BEGIN, END, section, "Predicted against measured steps on the CPU")


if __name__ == "__main__":
    sys.exit(main())
