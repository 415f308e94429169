#!/usr/bin/env python3
"""Regenerates the budget-sweep section of docs/results.md.

For one workload (by default ResNet-50 at 224x224, batch 184, on
`v100-16g-nvlink2`), runs `spillway plan --json` for `recompute`, `swap` and
`hybrid` at budgets from 16% to 100% of the `none` arena in steps of 2%, and
tabulates each policy's predicted overhead over `none`: where each becomes
feasible, how smoothly its overhead falls as memory grows, and whether
`hybrid` ever gets slower with more memory. Standard library only; the
figures are the simulator's predictions.

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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=str(ROOT / "build/release/src/cli/spillway"))
    parser.add_argument("--print", action="store_true", help="print instead of editing the doc")
    options = parser.parse_args()
    none_arena = plan(options.binary, "none", 2**40)["arena_bytes"]
    lines = ["| budget (% of none) | " + " | ".join(POLICIES) + " |",
             "|---|" + "---|" * len(POLICIES)]
    previous_hybrid = None
    increases = []
    # From just above the smallest arena `hybrid` reaches (14% of `none`).
    for percent in range(16, 101, 2):
        budget = none_arena * percent // 100
        cells = []
        for policy in POLICIES:
            result = plan(options.binary, policy, budget)
            cells.append(f"{100 * result['overhead']:+.1f}%" if result["feasible"] else "-")
            if policy == "hybrid" and result["feasible"]:
                if previous_hybrid is not None and result["step_time_s"] > previous_hybrid:
                    increases.append(percent)
                previous_hybrid = result["step_time_s"]
        lines.append(f"| {percent}% | " + " | ".join(cells) + " |")
        print(lines[-1], file=sys.stderr)
    today = datetime.date.today().isoformat()
    verdict = ("`hybrid`'s step time never grows with the budget in this sweep."
               if not increases else
               "`hybrid`'s step time grows with the budget at: " +
               ", ".join(f"{p}%" for p in increases) + ".")
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
