#!/usr/bin/env python3
"""Regenerates the memory-floor section of docs/results.md.

For each workload, plans in each backward order (`--backward-order
topological`, `memory-aware`, `lookahead`, and `auto`, the default, which
picks one of them per budget) and tabulates the `none` arena, the smallest arena `swap`, `recompute`
and `hybrid` reach (each planned at a 1-byte budget, so it reports the least
it can do), and, at the default budget of the paper's V100 workloads,
`hybrid`'s predicted overhead over `none`. Standard library only; arenas and
step times are the planner's and simulator's, on any machine the same.

  bench/memory_floor.py [--binary build/release/src/cli/spillway] [--print]
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
BEGIN = "<!-- memory-floor:begin (bench/memory_floor.py writes this part) -->"
END = "<!-- memory-floor:end -->"
V100 = ["--hardware", "v100-16g-nvlink2"]
H200 = ["--hardware", "h200-141g-pcie5"]
# (label, flags, whether to plan hybrid at the default budget too)
WORKLOADS = [
    ("ResNet-50, 8000x8000", ["--model", "resnet50", "--image", "8000", *V100], True),
    ("ResNet-152, 7500x7500", ["--model", "resnet152", "--image", "7500", *V100], True),
    ("DeepLabV3+, 1000x1000, batch 16",
     ["--model", "deeplabv3plus", "--image", "1000", "--batch", "16", *V100], True),
    ("ResNet-50, 224x224, batch 184", ["--model", "resnet50", "--batch", "184", *V100], False),
    ("GPT-2 124M, batch 8, 1024 tokens",
     ["--model", "gpt2", "--batch", "8", "--seq-len", "1024", *H200], False),
]
ORDERS = ["topological", "memory-aware", "lookahead", "auto"]
POLICIES = ["swap", "recompute", "hybrid"]
GIB = 2**30


def plan(binary, flags, order, policy, budget=None):
    command = [binary, "plan", *flags, "--policy", policy, "--backward-order", order, "--json"]
    if budget is not None:
        command += ["--budget", str(budget)]
    out = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=str(ROOT / "build/release/src/cli/spillway"))
    parser.add_argument("--print", action="store_true", help="print instead of editing the doc")
    options = parser.parse_args()
    lines = ["| workload | backward order | none | swap | recompute | hybrid "
             "| hybrid at the default budget |",
             "|---|---|---|---|---|---|---|"]
    for label, flags, at_default in WORKLOADS:
        for order in ORDERS:
            none = plan(options.binary, flags, order, "none", 2**50)
            cells = [f"{none['arena_bytes'] / GIB:.2f} GiB"]
            chosen = []  # what `auto` chose: at the floor, then at the default budget
            for policy in POLICIES:
                result = plan(options.binary, flags, order, policy, 1)
                cells.append(f"{result['smallest_arena_bytes'] / GIB:.2f} GiB")
            chosen.append(f"{result['backward_order']} at the floor")
            if at_default:
                result = plan(options.binary, flags, order, "hybrid")
                cells.append(f"{100 * result['overhead']:+.1f}%" if result["feasible"] else "-")
                chosen.append(f"{result['backward_order']} at the default budget")
            else:
                cells.append("")
            shown = f"auto ({', '.join(chosen)})" if order == "auto" else order
            lines.append(f"| {label} | {shown} | " + " | ".join(cells) + " |")
            print(lines[-1], file=sys.stderr)
    today = datetime.date.today().isoformat()
    section = "\n".join([
        BEGIN,
        f"Generated {today} by `bench/memory_floor.py` on {platform.node()} "
        f"({platform.machine()}, {platform.system()}). Arenas: `none`'s, and the smallest each "
        "policy reaches (planned at a 1-byte budget); the last column is `hybrid`'s predicted "
        "overhead over `none` at the profile's default budget (15.3 GiB).",
        "",
        *lines,
        END,
    ])
    if options.print:
        print(section)
    else:
        write_section(BEGIN, END, section, "A lower memory floor: the backward order")


if __name__ == "__main__":
    main()
