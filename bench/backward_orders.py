#!/usr/bin/env python3
"""Regenerates the section of docs/results.md on `hybrid` in every backward order.

On the paper's three workloads (the V100 at its default budget, the H200 with
PCIe 5 at a quarter and at half of each workload's `none` arena) and the
48-layer GPT-2 of the planning-time benchmark (the H200 at half), plans
`hybrid` with `--backward-order auto` (the default: one order, chosen by the
memory floors) and with `--backward-order each` (every order whose schedule
differs, the fastest plan kept), side by side, and tabulates each one's
predicted overhead over `none`, the order its plan is in, and the planning
time and candidates. Step times are the simulator's, the same on any machine;
planning times are this machine's, and only their ratio means anything.
Standard library only; about 8 minutes on a 2-core machine.

  bench/backward_orders.py [--binary build/release/src/cli/spillway] [--print]
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
BEGIN = "<!-- backward-orders:begin (bench/backward_orders.py writes this part) -->"
END = "<!-- backward-orders:end -->"
V100_AND_H200 = [("v100-16g-nvlink2", None), ("h200-141g-pcie5", 4), ("h200-141g-pcie5", 2)]
# (name, flags, [(hardware, None for its default budget or n for 1/n of the
# `none` arena on it)]): the paper's workloads, and the planning-time
# benchmark's GPT-2.
WORKLOADS = [
    ("ResNet-50, 8000x8000, batch 1", ["--model", "resnet50", "--image", "8000"], V100_AND_H200),
    ("ResNet-152, 7500x7500, batch 1", ["--model", "resnet152", "--image", "7500"], V100_AND_H200),
    ("DeepLabV3+ (ResNet-50), 1000x1000, batch 16",
     ["--model", "deeplabv3plus", "--image", "1000", "--batch", "16"], V100_AND_H200),
    ("GPT-2 124M, 48 layers", ["--model", "gpt2", "--layers", "48"], [("h200-141g-pcie5", 2)]),
]
SHARE = {None: "default budget", 4: "a quarter", 2: "half"}

def plan(binary, args):
    run = subprocess.run([binary, "plan", *args, "--json"], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"spillway plan {' '.join(args)} failed: {run.stderr.strip()}")
    return json.loads(run.stdout)


def cell(result, with_candidates):
    if not result["feasible"]:
        return "-"
    candidates = f", {result['evaluations']:,} candidates" if with_candidates else ""
    return (f"{100 * result['overhead']:+.2f}% ({result['backward_order']}, "
            f"{result['planning_ms'] / 1e3:.1f} s{candidates})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=str(ROOT / "build/release/src/cli/spillway"))
    parser.add_argument("--print", action="store_true", help="print instead of editing the doc")
    options = parser.parse_args()
    lines = ["| workload | hardware, budget | `auto` (order, planning) | "
             "`each` (order kept, planning, candidates) | planning, `each` over `auto` |",
             "|---|---|---|---|---|"]
    for name, args, rows in WORKLOADS:
        for hardware, share in rows:
            budget = None
            if share is not None:
                budget = plan(options.binary, [*args, "--hardware", hardware, "--policy", "none",
                                               "--budget", "1TiB"])["arena_bytes"] // share
            label = SHARE[share]
            base = [*args, "--hardware", hardware, "--policy", "hybrid"]
            if budget is not None:
                base += ["--budget", str(budget)]
            auto = plan(options.binary, [*base, "--backward-order", "auto"])
            each = plan(options.binary, [*base, "--backward-order", "each"])
            ratio = each["planning_ms"] / auto["planning_ms"]
            lines.append(f"| {name} | `{hardware}`, {label} | {cell(auto, False)} | "
                         f"{cell(each, True)} | {ratio:.1f}x |")
            print(lines[-1], file=sys.stderr)
    today = datetime.date.today().isoformat()
    section = "\n".join([
        BEGIN,
        f"Generated {today} by `bench/backward_orders.py` on {platform.node()} "
        f"({platform.machine()}, {platform.system()}). Each cell: `hybrid`'s predicted overhead "
        "over `none`, the backward order of its plan, and the planning time measured here (the "
        "two runs of a row one after the other).",
        "",
        *lines,
        END,
    ])
    if options.print:
        print(section)
    else:
        write_section(BEGIN, END, section, "The backward order at the default budget")


if __name__ == "__main__":
    main()
