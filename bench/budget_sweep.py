#!/usr/bin/env python3
"""Regenerates the budget-sweep section of docs/results.md.

For one workload (by default ResNet-50 at 224x224, batch 184, on
`v100-16g-nvlink2`), runs `spillway plan --json` for `recompute`, `swap` and
`hybrid` at budgets from 16% to 100% of the `none` arena in steps of 2%, and
`spillway sweep --json` for `hybrid` over the same budgets (each budget also
refining the plan of the one below), and tabulates each policy's predicted
overhead over `none`: where each becomes feasible, how smoothly its overhead
falls as memory grows, and whether `hybrid` ever gets slower with more
memory. Standard library only; the figures are the simulator's predictions.

  bench/budget_sweep.py [--binary build/release/src/cli/spillway] [--print]
"""
import argparse
import datetime
import json
import pathlib
import platform
import subprocess
import sys

from results_doc import write_section

ROOT = pathlib.Path(__file__).resolve().parent.parent
BEGIN = "<!-- budget-sweep:begin (bench/budget_sweep.py writes this part) -->"
END = "<!-- budget-sweep:end -->"
WORKLOAD = ["--model", "resnet50", "--image", "224", "--batch", "184",
            "--hardware", "v100-16g-nvlink2"]
POLICIES = ["swap", "recompute", "hybrid"]


def plan(binary, policy, budget):
    out = subprocess.run([binary, "plan", *WORKLOAD, "--policy", policy, "--budget", str(budget),
                          "--json"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def sweep(binary, budgets):
    """`hybrid` over `budgets` in one `spillway sweep`: {budget: point}."""
    out = subprocess.run([binary, "sweep", *WORKLOAD, "--budgets", ",".join(map(str, budgets)),
                          "--json"], check=True, capture_output=True, text=True)
    return {point["budget_bytes"]: point for point in json.loads(out.stdout)["points"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=str(ROOT / "build/release/src/cli/spillway"))
    parser.add_argument("--print", action="store_true", help="print instead of editing the doc")
    options = parser.parse_args()
    none_arena = plan(options.binary, "none", 2**40)["arena_bytes"]
    # From 16%: the smallest arena `hybrid` reaches is 11% of `none`'s.
    percents = list(range(16, 101, 2))
    swept = sweep(options.binary, [none_arena * percent // 100 for percent in percents])
    lines = ["| budget (% of none) | " + " | ".join(POLICIES) + " | hybrid in a sweep |",
             "|---|" + "---|" * (len(POLICIES) + 1)]
    previous_hybrid = None
    increases = []
    for percent in percents:
        budget = none_arena * percent // 100
        cells = []
        for policy in POLICIES:
            result = plan(options.binary, policy, budget)
            cells.append(f"{100 * result['overhead']:+.1f}%" if result["feasible"] else "-")
            if policy == "hybrid" and result["feasible"]:
                if previous_hybrid is not None and result["step_time_s"] > previous_hybrid:
                    increases.append(percent)
                previous_hybrid = result["step_time_s"]
        point = swept[none_arena * percent // 100]
        cells.append(f"{100 * point['overhead']:+.1f}%" if point["feasible"] else "-")
        lines.append(f"| {percent}% | " + " | ".join(cells) + " |")
        print(lines[-1], file=sys.stderr)
    today = datetime.date.today().isoformat()
    verdict = ("`hybrid`, one budget at a time, never gets slower as the budget grows."
               if not increases else
               "`hybrid`, one budget at a time, gets slower as the budget grows at: " +
               ", ".join(f"{p}%" for p in increases) + ".")
    steps = [point["step_time_s"] for _, point in sorted(swept.items()) if point["feasible"]]
    rises = sum(1 for a, b in zip(steps, steps[1:]) if b > a * (1 + 1e-9))
    verdict += (" In the sweep it never does." if rises == 0 else
                f" In the sweep it does {rises} times, which it must not: a bug.")
    section = "\n".join([
        BEGIN,
        f"Generated {today} by `bench/budget_sweep.py` on {platform.node()} "
        f"({platform.machine()}, {platform.system()}): `{' '.join(WORKLOAD)}`, `none` arena "
        f"{none_arena / 2**30:.2f} GiB; overheads over `none` as the simulator predicts them "
        "(-: the policy cannot fit that budget).",
        "",
        "\n".join(lines),
        "",
        verdict,
        END,
    ])
    if options.print:
        print(section)
        return
    write_section(BEGIN, END, section, "Overhead against the budget")


if __name__ == "__main__":
    sys.exit(main())
