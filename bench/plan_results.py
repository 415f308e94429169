#!/usr/bin/env python3
"""Regenerates the planner section of docs/results.md.

Runs `spillway compare --json` on the paper's three workloads, on the paper's
machine (v100-16g-nvlink2, its 16 GB less the profile's reserve) and on an
H200 with PCIe 5 at a quarter and at half of each workload's footprint, and
writes one table per machine and budget between the markers in
docs/results.md, with the H200 goal (`hybrid`'s overhead at most 0.6x the
best of `swap` and `recompute`) checked row by row. Standard library
only; the figures are the simulator's predictions, not measurements.

  bench/plan_results.py [--binary build/release/src/cli/spillway] [--check]
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
BEGIN = "<!-- plan-results:begin (bench/plan_results.py writes this part) -->"
END = "<!-- plan-results:end -->"

# The paper's workloads; DeepLabV3+ gets a batch whose footprint is at least
# twice the V100 budget (batch 1 needs only 2.7 GiB).
WORKLOADS = [
    ("ResNet-50, 8000x8000, batch 1", ["--model", "resnet50", "--image", "8000", "--batch", "1"]),
    ("ResNet-152, 7500x7500, batch 1", ["--model", "resnet152", "--image", "7500", "--batch", "1"]),
    ("DeepLabV3+ (ResNet-50), 1000x1000, batch 16",
     ["--model", "deeplabv3plus", "--image", "1000", "--batch", "16"]),
]
PAPER_SPEEDUP = {"ResNet-50": "15.5%", "ResNet-152": "15.3%", "DeepLabV3+": "12.4%"}


def run(binary, args):
    out = subprocess.run([binary, *args, "--json"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def footprint(binary, workload_args):
    none = run(binary, ["plan", *workload_args, "--policy", "none", "--budget", "1TiB"])
    return none["arena_bytes"]


def gib(n):
    return f"{n / 2**30:.1f} GiB"


def table(binary, hardware, budget_for, results=None):
    """The table for one machine; `results` (if given) collects each
    workload's rows by policy."""
    lines = [
        "| workload | budget | policy | arena | step (s) | overhead vs none | speedup vs swap | "
        "to host | recompute | planning |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, args in WORKLOADS:
        budget = budget_for(args)
        budget_args = ["--budget", str(budget)] if budget else []
        rows = run(binary, ["compare", *args, "--hardware", hardware, *budget_args])
        if results is not None:
            results[name] = {row["policy"]: row for row in rows}
        for row in rows:
            if row["policy"] == "none" and not row["feasible"]:
                cells = [f"needs {gib(row['smallest_arena_bytes'])}", "-", "-", "-", "-", "-",
                         f"{row['planning_ms']:.0f} ms"]
            elif not row["feasible"]:
                cells = [f"infeasible (needs {gib(row['smallest_arena_bytes'])})", "-", "-", "-",
                         "-", "-", f"{row['planning_ms']:.0f} ms"]
            else:
                speedup = row.get("speedup_over_swap")
                cells = [
                    gib(row["arena_bytes"]),
                    f"{row['step_time_s']:.3f}",
                    f"{100 * row['overhead']:+.1f}%",
                    "-" if speedup is None else f"{100 * speedup:+.1f}%",
                    gib(row["d2h_bytes"]),
                    f"{row['recompute_flops'] / 1e12:.2f} TFLOP",
                    f"{row['planning_ms']:.0f} ms",
                ]
            lines.append(f"| {name} | {gib(row['budget_bytes'])} | {row['policy']} | " +
                         " | ".join(cells) + " |")
    return "\n".join(lines)


def speedup(rows, policy, over):
    """How much faster `policy`'s step is than `over`'s ('-' if either does not fit)."""
    a, b = rows.get(policy), rows.get(over)
    if not a or not b or not a["feasible"] or not b["feasible"]:
        return "-"
    return f"{100 * (b['step_time_s'] / a['step_time_s'] - 1):+.1f}%"


def paper_table(results):
    lines = [
        "| workload | paper: hybrid over TFLMS | `hybrid-seed-lms` over `swap-lms` | "
        "`hybrid-seed` over `swap` | `hybrid` over `swap-lms` | `hybrid` over `swap` | "
        "`swap-lms` tuning |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, _ in WORKLOADS:
        rows = results[name]
        paper = PAPER_SPEEDUP[name.split(",")[0].split(" ")[0]]
        lines.append(" | ".join([
            f"| {name}", paper, speedup(rows, "hybrid-seed-lms", "swap-lms"),
            speedup(rows, "hybrid-seed", "swap"), speedup(rows, "hybrid", "swap-lms"),
            speedup(rows, "hybrid", "swap"), rows["swap-lms"].get("tuning", "-")]) + " |")
    return "\n".join(lines)


def h200_goal_table(by_share):
    """`hybrid`'s overhead against the best of `swap` and `recompute`, per
    H200 budget (`by_share`: share name -> workload -> policy -> row)."""
    lines = [
        "| workload | budget | best of `swap` and `recompute` | `hybrid` | ratio (goal: at most 0.6x) |",
        "|---|---|---|---|---|",
    ]
    for share, results in by_share.items():
        for name, _ in WORKLOADS:
            rows = results[name]
            baselines = [rows[p] for p in ("swap", "recompute") if p in rows and rows[p]["feasible"]]
            hybrid = rows["hybrid"]
            if not baselines or not hybrid["feasible"]:
                lines.append(f"| {name} | {share} | - | - | - |")
                continue
            best = min(baselines, key=lambda row: row["overhead"])
            ratio = hybrid["overhead"] / best["overhead"] if best["overhead"] > 0 else float("nan")
            lines.append(f"| {name} | {share} | {best['policy']} {100 * best['overhead']:+.1f}% | "
                         f"{100 * hybrid['overhead']:+.1f}% | {ratio:.2f}x |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=str(ROOT / "build/release/src/cli/spillway"))
    parser.add_argument("--print", action="store_true", help="print instead of editing the doc")
    options = parser.parse_args()
    binary = options.binary
    footprints = {tuple(args): footprint(binary, args) for _, args in WORKLOADS}
    v100_results = {}
    v100 = table(binary, "v100-16g-nvlink2", lambda args: None, v100_results)
    h200_quarter_results = {}
    h200 = table(binary, "h200-141g-pcie5", lambda args: footprints[tuple(args)] // 4,
                 h200_quarter_results)
    h200_half_results = {}
    h200_half = table(binary, "h200-141g-pcie5", lambda args: footprints[tuple(args)] // 2,
                      h200_half_results)
    today = datetime.date.today().isoformat()
    section = "\n".join([
        BEGIN,
        f"Generated {today} by `bench/plan_results.py` on {platform.node()} "
        f"({platform.machine()}, {platform.system()}); predicted by the simulator with the "
        "roofline cost model, not measured on a GPU.",
        "",
        "### The paper's comparison, on the V100 profile at 16 GB",
        "",
        "Speedups are step-time ratios (positive: faster); the paper's are measured, ours "
        "predicted.",
        "",
        paper_table(v100_results),
        "",
        "### V100 16 GB with NVLink 2.0 (`v100-16g-nvlink2`, default budget)",
        "",
        v100,
        "",
        "### H200 with PCIe 5 (`h200-141g-pcie5`), budget a quarter of the `none` arena",
        "",
        h200,
        "",
        "### H200 with PCIe 5, budget half of the `none` arena",
        "",
        h200_half,
        "",
        "### The H200 goal",
        "",
        h200_goal_table({"a quarter": h200_quarter_results, "half": h200_half_results}),
        END,
    ])
    if options.print:
        print(section)
        return
    write_section(BEGIN, END, section, "Planning the paper's workloads")


if __name__ == "__main__":
    sys.exit(main())
