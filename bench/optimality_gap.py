#!/usr/bin/env python3
"""Regenerates the optimality-gap sections of docs/results.md.

For small workloads of every image family and GPT-2, on `v100-16g-nvlink2`
and `h200-141g-pcie5`, at three budgets from 90% of the `none` arena down to
just above the smallest arena `hybrid` reaches, runs `spillway compare --json`
(every heuristic) and `spillway plan --policy optimal --json` (the integer
program's proven lower bound, and its result), and tabulates each policy's
predicted step as overhead over that bound. The bound is a relaxation's, so
an overhead over it is an upper bound on how far a plan is from the best
possible; `optimal`'s own plan is the best plan known. Every plan is made
with `--fetch-once`: the bound covers the plans that fetch each spilled
tensor back at most once.

Then, for the paper's three workloads on `v100-16g-nvlink2` at its default
budget, runs `spillway plan --policy hybrid --bound --json`: the reduced LP's
bound for graphs too large for `optimal`, and `hybrid`'s gap to it
(`--paper-only` regenerates just that part, in about a minute). Standard
library only; every figure is the simulator's prediction.

  bench/optimality_gap.py [--binary build/release/src/cli/spillway] [--print] [--paper-only]
"""
import argparse
import datetime
import json
import pathlib
import platform
import statistics
import subprocess
import sys

from plan_results import WORKLOADS as PAPER_WORKLOADS
from results_doc import write_section

ROOT = pathlib.Path(__file__).resolve().parent.parent
BEGIN = "<!-- optimality-gap:begin (bench/optimality_gap.py writes this part) -->"
END = "<!-- optimality-gap:end -->"
PAPER_BEGIN = "<!-- paper-bound:begin (bench/optimality_gap.py writes this part) -->"
PAPER_END = "<!-- paper-bound:end -->"
WORKLOADS = [
    ("ResNet-18 224px b16", ["--model", "resnet18", "--image", "224", "--batch", "16"]),
    ("ResNet-34 160px b16", ["--model", "resnet34", "--image", "160", "--batch", "16"]),
    ("U-Net 256px b4", ["--model", "unet", "--image", "256", "--batch", "4"]),
    ("DeepLabV3+ 256px b4", ["--model", "deeplabv3plus", "--image", "256", "--batch", "4"]),
    ("GPT-2 4L 512tok b8", ["--model", "gpt2", "--layers", "4", "--seq-len", "512",
                            "--batch", "8"]),
]
HARDWARE = ["v100-16g-nvlink2", "h200-141g-pcie5"]
HEURISTICS = ["swap", "recompute", "swap-lms", "hybrid-seed", "hybrid"]


def gap(step, bound):
    """A step's overhead over the bound, as a table cell. The bound is proven,
    so a step below it is a bug, flagged; within rounding it is +0.0%."""
    ratio = step / bound - 1
    if ratio < -1e-6:
        return f"**{100 * ratio:+.2f}% (below the bound!)**"
    return f"{100 * max(ratio, 0):+.1f}%"


def run(binary, args):
    out = subprocess.run([binary, *args, "--json"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def paper_section(binary):
    """--bound on the paper's workloads, and hybrid's gap to it."""
    lines = ["| workload | none (s) | bound (s) | bound over none | LP | `hybrid` (s) | "
             "`hybrid` over the bound |",
             "|---|---|---|---|---|---|---|"]
    for name, workload in PAPER_WORKLOADS:
        result = run(binary, ["plan", *workload, "--hardware", "v100-16g-nvlink2",
                              "--policy", "hybrid", "--bound"])
        bound = result["lower_bound"]
        none_s = result["none_step_time_s"]
        if bound["step_time_s"] is None:
            lines.append(f"| {name} | {none_s:.4g} | no plan fits | - | - | - | - |")
            continue
        bound_s = bound["step_time_s"]
        lp = (f"{bound['solve_s']:.1f} s, {bound['columns']:,} columns, {bound['rows']:,} rows" +
              ("" if bound["solved"] else " (stopped)"))
        hybrid = (f"{result['step_time_s']:.4g}", gap(result["step_time_s"], bound_s)) \
            if result["feasible"] else ("infeasible", "-")
        lines.append(f"| {name} | {none_s:.4g} | {bound_s:.4g} | {gap(bound_s, none_s)} | {lp} | "
                     f"{hybrid[0]} | {hybrid[1]} |")
        print(lines[-1], file=sys.stderr)
    today = datetime.date.today().isoformat()
    return "\n".join([
        PAPER_BEGIN,
        f"Generated {today} by `bench/optimality_gap.py --paper-only` on {platform.node()} "
        f"({platform.machine()}, {platform.system()}): `plan --policy hybrid --bound` on "
        "`v100-16g-nvlink2` at its default budget (15.3 GiB). The LP's time is measured, the "
        "rest predicted.",
        "",
        "\n".join(lines),
        PAPER_END,
    ])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=str(ROOT / "build/release/src/cli/spillway"))
    parser.add_argument("--solver-time-limit", default="120",
                        help="seconds per integer program (default 120)")
    parser.add_argument("--print", action="store_true", help="print instead of editing the doc")
    parser.add_argument("--paper-only", action="store_true",
                        help="only the paper's workloads' --bound table (about a minute)")
    options = parser.parse_args()

    paper = paper_section(options.binary)
    if options.print:
        print(paper)
    else:
        write_section(PAPER_BEGIN, PAPER_END, paper, "The paper's workloads: --bound")
    if options.paper_only:
        return

    lines = ["| workload | hardware | budget | bound (s) | " + " | ".join(HEURISTICS) +
             " | optimal | the program's own plan | solved in |",
             "|---|---|---|---|" + "---|" * len(HEURISTICS) + "---|---|---|"]
    hybrid_gaps = []
    hybrid_vs_optimal = []
    wide = 0  # rows where hybrid is more than 3% above the bound
    wide_own_worse = 0  # of those, rows whose program's own plan is slower or does not fit
    unsolved = 0
    for label, workload in WORKLOADS:
        for hardware in HARDWARE:
            # The bound covers plans that fetch each spilled tensor back at
            # most once: every plan here keeps to them (--fetch-once).
            base = ["plan", *workload, "--hardware", hardware, "--fetch-once"]
            none_arena = run(options.binary, [*base, "--policy", "none",
                                              "--budget", str(2**40)])["arena_bytes"]
            floor = run(options.binary, [*base, "--policy", "hybrid",
                                         "--budget", "1"])["smallest_arena_bytes"]
            high = none_arena * 90 // 100
            low = floor * 102 // 100
            if low >= high:
                print(f"{label} on {hardware}: no room between the floor and 90%",
                      file=sys.stderr)
                continue
            for budget in (high, (high + low) // 2, low):
                share = f"{100 * budget / none_arena:.0f}%"
                compare = run(options.binary, ["compare", *workload, "--hardware", hardware,
                                               "--fetch-once", "--budget", str(budget)])
                steps = {r["policy"]: r["step_time_s"] for r in compare if r["feasible"]}
                optimal = run(options.binary, [*base, "--policy", "optimal",
                                               "--budget", str(budget), "--solver-time-limit",
                                               options.solver_time_limit])
                bound = optimal["lower_bound"]
                bound_s = bound["step_time_s"]
                if not bound["solved"]:
                    unsolved += 1
                cells = []
                for policy in HEURISTICS + ["optimal"]:
                    step = optimal["step_time_s"] if policy == "optimal" else steps.get(policy)
                    feasible = optimal["feasible"] if policy == "optimal" else step is not None
                    if not feasible or bound_s is None:
                        cells.append("-")
                    else:
                        cells.append(gap(step, bound_s))
                if "hybrid" in steps and bound_s:
                    hybrid_gaps.append(steps["hybrid"] / bound_s - 1)
                    if optimal["feasible"]:
                        hybrid_vs_optimal.append(steps["hybrid"] / optimal["step_time_s"] - 1)
                # The plan read back from the program's best solution, simulated:
                # how far the relaxation's optimum is from a plan it describes.
                own = bound.get("relaxation_plan")
                if "hybrid" in steps and bound_s and steps["hybrid"] > 1.03 * bound_s:
                    wide += 1
                    if own is not None and (not own["fits"] or
                                            own["step_time_s"] > steps["hybrid"]):
                        wide_own_worse += 1
                if own is None or bound_s is None:
                    cells.append("-")
                else:
                    cells.append(gap(own["step_time_s"], bound_s) +
                                 ("" if own["fits"] else
                                  f" (needs {own['arena_bytes'] / 2**20:.0f} MiB)"))
                solved = f"{bound['solve_s']:.1f} s" + ("" if bound["solved"] else " (stopped)")
                bound_text = "none fits" if bound_s is None else f"{bound_s:.4g}"
                lines.append(f"| {label} | {hardware} | {share} | {bound_text} | " +
                             " | ".join(cells) + f" | {solved} |")
                print(lines[-1], file=sys.stderr)

    today = datetime.date.today().isoformat()
    summary = []
    if hybrid_gaps:
        summary.append(
            f"Over {len(hybrid_gaps)} rows, `hybrid` is at most {100 * max(hybrid_gaps):.1f}% "
            f"and on average {100 * statistics.mean(hybrid_gaps):.1f}% above the bound; "
            f"above the best plan known (`optimal`'s) it is at most "
            f"{100 * max(hybrid_vs_optimal, default=0):.1f}% and on average "
            f"{100 * statistics.mean(hybrid_vs_optimal or [0]):.1f}%.")
    if wide:
        summary.append(
            f"On {wide_own_worse} of the {wide} rows where `hybrid` is more than 3% above the "
            "bound, the plan of the program's own optimum is slower than `hybrid`'s or does "
            "not fit: there the gap is the relaxation's looseness (what the program leaves "
            "out, docs/planner.md), not a decision `hybrid` is shown to miss.")
    if unsolved:
        summary.append(f"{unsolved} of the programs {'was' if unsolved == 1 else 'were'} "
                       f"stopped by the solver's time limit ({options.solver_time_limit} s): "
                       "the bound there is the best proven by then.")
    section = "\n".join([
        BEGIN,
        f"Generated {today} by `bench/optimality_gap.py` on {platform.node()} "
        f"({platform.machine()}, {platform.system()}). Budgets: 90% of the `none` arena, "
        "2% above the smallest arena `hybrid` reaches, and halfway between. Each cell is the "
        "policy's predicted step over the proven lower bound (-: the policy cannot fit the "
        "budget); `optimal` is the faster of its own plan and `hybrid`'s. The program's own "
        "plan is the one its best solution describes, rewritten, laid out and simulated, "
        "with the arena it needs where that is more than the budget: a relaxation's "
        "optimum need not be a plan that fits, nor one as fast as it promises.",
        "",
        "\n".join(lines),
        "",
        " ".join(summary),
        END,
    ])
    if options.print:
        print(section)
        return
    write_section(BEGIN, END, section, "Optimality gap")


if __name__ == "__main__":
    sys.exit(main())
