#!/usr/bin/env python3
"""Regenerates the budget-monotonicity section of docs/results.md.

More memory should never give a slower plan. For four small workloads on a
fine grid of budgets (25, from 35% to 100% of the `none` arena), runs
`spillway plan --policy hybrid --json` at each budget alone and counts the
budgets at which `hybrid`'s plan is slower than its plan at some smaller
budget, and by how much; then `spillway sweep --budgets ... --json` on the
same grid, where each budget starts from the plan of the one below (none
may be slower, by construction), and counts the budgets it plans faster
than the runs alone. `--baseline` runs a second binary (another planner)
one budget at a time beside it. Standard library only; the step times are
the simulator's predictions, so the figures do not depend on the machine.

  bench/budget_monotonicity.py [--binary build/release/src/cli/spillway]
                               [--baseline OTHER_BINARY] [--print]
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
BEGIN = "<!-- budget-monotonicity:begin (bench/budget_monotonicity.py writes this part) -->"
END = "<!-- budget-monotonicity:end -->"
WORKLOADS = [
    ("ResNet-50, 224x224, batch 184, `v100-16g-nvlink2`",
     ["--model", "resnet50", "--image", "224", "--batch", "184", "--hardware",
      "v100-16g-nvlink2"]),
    ("ResNet-18, 224x224, batch 16, `h200-141g-pcie5`",
     ["--model", "resnet18", "--image", "224", "--batch", "16", "--hardware", "h200-141g-pcie5"]),
    ("GPT-2, 4 layers, 512 tokens, batch 8, `h200-141g-pcie5`",
     ["--model", "gpt2", "--layers", "4", "--seq-len", "512", "--batch", "8", "--hardware",
      "h200-141g-pcie5"]),
    ("U-Net, 256x256, batch 4, `h200-141g-pcie5`",
     ["--model", "unet", "--image", "256", "--batch", "4", "--hardware", "h200-141g-pcie5"]),
]
POINTS = 25  # budgets from 35% to 100% of the `none` arena


def plan(binary, workload, policy, budget):
    out = subprocess.run([binary, "plan", *workload, "--policy", policy, "--budget", str(budget),
                          "--json"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def budgets(binary, workload):
    none_arena = plan(binary, workload, "none", 2**40)["arena_bytes"]
    return [int(none_arena * (0.35 + 0.65 * k / (POINTS - 1))) for k in range(POINTS)]


def alone(binary, workload, grid):
    """`hybrid`'s plan at each budget of `grid`, planned alone: {budget: result}."""
    return {budget: plan(binary, workload, "hybrid", budget) for budget in grid}


def swept(binary, workload, grid):
    """The same, from one `spillway sweep` over `grid`."""
    out = subprocess.run([binary, "sweep", *workload, "--budgets",
                          ",".join(map(str, grid)), "--json"],
                         check=True, capture_output=True, text=True)
    return {point["budget_bytes"]: point for point in json.loads(out.stdout)["points"]}


def monotonicity(results):
    """(budgets that fit, [(budget, excess over the best smaller budget's)], mean step)."""
    fastest = None  # the fastest plan at a smaller budget
    steps, slower = [], []
    for budget in sorted(results):
        result = results[budget]
        if not result["feasible"]:
            continue
        step = result["step_time_s"]
        steps.append(step)
        if fastest is not None and step > fastest * (1 + 1e-9):
            slower.append((budget, step / fastest - 1))
        fastest = step if fastest is None else min(fastest, step)
    return len(steps), slower, sum(steps) / max(1, len(steps))


def cells(result):
    fits, slower, mean = result
    largest = max((excess for _, excess in slower), default=0)
    return [str(fits), str(len(slower)), f"{100 * largest:.2f}%", f"{1000 * mean:.4f} ms"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=str(ROOT / "build/release/src/cli/spillway"))
    parser.add_argument("--baseline", help="another spillway binary to sweep beside it")
    parser.add_argument("--print", action="store_true", help="print instead of editing the doc")
    options = parser.parse_args()
    binaries = [("this planner", options.binary)]
    if options.baseline:
        binaries.insert(0, ("baseline", options.baseline))
    header = ["workload", "planner", "budgets that fit", "slower than at a smaller budget",
              "largest excess", "mean step"]
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    totals = {name: 0 for name, _ in binaries}
    totals["sweep"] = 0
    gains = []  # per budget where the sweep is faster than alone: by how much
    losses = []  # and where it is slower
    compared = 0
    for title, workload in WORKLOADS:
        for name, binary in binaries:
            results = alone(binary, workload, budgets(binary, workload))
            result = monotonicity(results)
            totals[name] += len(result[1])
            lines.append("| " + " | ".join([title, name + ", one budget at a time",
                                            *cells(result)]) + " |")
            print(lines[-1], file=sys.stderr)
        # Over the grid of this planner, the last of `binaries`.
        swept_results = swept(options.binary, workload, list(results))
        result = monotonicity(swept_results)
        totals["sweep"] += len(result[1])
        lines.append("| " + " | ".join([title, "this planner, in a sweep", *cells(result)]) + " |")
        print(lines[-1], file=sys.stderr)
        # `results` is this planner's, the last of `binaries`, planned alone.
        for budget, point in swept_results.items():
            by_itself = results[budget]
            if not point["feasible"] or not by_itself["feasible"]:
                continue
            compared += 1
            ratio = point["step_time_s"] / by_itself["step_time_s"]
            if ratio < 1 - 1e-9:
                gains.append(1 - ratio)
            elif ratio > 1 + 1e-9:
                losses.append(ratio - 1)
    today = datetime.date.today().isoformat()
    summary = ", ".join(f"{name} {count}" for name, count in totals.items())
    section = "\n".join([
        BEGIN,
        f"Generated {today} by `bench/budget_monotonicity.py` on {platform.node()} "
        f"({platform.machine()}, {platform.system()}): `hybrid` at {POINTS} budgets from 35% to "
        "100% of each workload's `none` arena. A budget counts as slower when its plan is "
        "slower than the plan at some smaller budget of the grid; the excess is over the "
        "fastest of those. Step times are the simulator's predictions.",
        "",
        "\n".join(lines),
        "",
        f"Budgets slower than a smaller budget, over the {len(WORKLOADS)} workloads: {summary}. "
        f"Of the {compared} budgets where both fit, the sweep planned {len(gains)} faster than "
        "the run at that budget alone"
        + (f" (by {100 * min(gains):.2f}% to {100 * max(gains):.2f}%, "
           f"{100 * sum(gains) / len(gains):.2f}% on average)" if gains else "")
        + f" and {len(losses)} slower"
        + (f" (by at most {100 * max(losses):.2f}%)." if losses else "."),
        END,
    ])
    if options.print:
        print(section)
        return
    write_section(BEGIN, END, section, "Budget monotonicity on a fine grid")


if __name__ == "__main__":
    main()
