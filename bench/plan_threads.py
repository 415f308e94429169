#!/usr/bin/env python3
"""Regenerates the section of docs/results.md on planning with several threads.

`hybrid` runs its lines of search (the race's refinements, `recompute`'s
starts) side by side on `--plan-threads` threads, and where a line runs
alone it evaluates each list of moves side by side, a candidate ahead of
the one being recorded, dropping those beyond the accepted one
(docs/planner.md, "Threads"). This plans the planning-time benchmark's
workloads with 1 and with 2 threads (and, with `--baseline`, the same with
another build, each row's runs one after the other), checks that every run
gives the same plan (step time, arena, candidates), and tabulates the wall
time of planning and the CPU time spent. Times are this machine's; only the
ratios within a row mean anything. Standard library only; about 5 minutes on
a 2-core machine (twice that with a baseline).

  bench/plan_threads.py [--binary build/release/src/cli/spillway] [--label NAME]
                        [--baseline OTHER_BINARY --baseline-label NAME] [--print]
"""
import argparse
import datetime
import json
import os
import pathlib
import platform
import resource
import subprocess
import sys

from results_doc import write_section

ROOT = pathlib.Path(__file__).resolve().parent.parent
BEGIN = "<!-- plan-threads:begin (bench/plan_threads.py writes this part) -->"
END = "<!-- plan-threads:end -->"
# (name, flags, hardware, None for the default budget or n for 1/n of `none`'s arena)
WORKLOADS = [
    ("ResNet-50, 8000x8000", ["--model", "resnet50", "--image", "8000"], "v100-16g-nvlink2", None),
    ("ResNet-152, 7500x7500", ["--model", "resnet152", "--image", "7500"], "v100-16g-nvlink2",
     None),
    ("DeepLabV3+, 1000x1000, batch 16",
     ["--model", "deeplabv3plus", "--image", "1000", "--batch", "16"], "v100-16g-nvlink2", None),
    ("GPT-2 124M, 48 layers", ["--model", "gpt2", "--layers", "48"], "h200-141g-pcie5", 2),
]
THREADS = [1, 2]


def plan(binary, args):
    """The plan's JSON, and the CPU seconds (user and system) the run took."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run = subprocess.run([binary, "plan", *args, "--json"], capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if run.returncode != 0:
        sys.exit(f"spillway plan {' '.join(args)} failed: {run.stderr.strip()}")
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return json.loads(run.stdout), cpu_s


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=str(ROOT / "build/release/src/cli/spillway"))
    parser.add_argument("--label", default="this build", help="--binary's name in the table")
    parser.add_argument("--baseline", help="another build's spillway, run beside --binary")
    parser.add_argument("--baseline-label", default="baseline", help="--baseline's name")
    parser.add_argument("--print", action="store_true", help="print instead of editing the doc")
    options = parser.parse_args()
    builds = [(options.label, options.binary)]
    if options.baseline:
        builds.insert(0, (options.baseline_label, options.baseline))
    header = "| workload | build | " + " | ".join(
        f"{n} thread{'s' if n > 1 else ''}: wall (CPU)" for n in THREADS) + " | candidates |"
    lines = [header, "|---|---|" + "---|" * len(THREADS) + "---|"]
    for name, args, hardware, share in WORKLOADS:
        base = [*args, "--hardware", hardware, "--policy", "hybrid"]
        if share is not None:
            none, _ = plan(options.binary, [*args, "--hardware", hardware, "--policy", "none",
                                            "--budget", "1TiB"])
            base += ["--budget", str(none["arena_bytes"] // share)]
        first = None
        for label, binary in builds:
            cells = []
            for threads in THREADS:
                result, cpu_s = plan(binary, [*base, "--plan-threads", str(threads)])
                same = (result["step_time_s"], result["arena_bytes"], result["evaluations"])
                if first is None:
                    first = same
                elif same != first:
                    sys.exit(f"{name}: {label} with {threads} threads planned {same}, "
                             f"not {first}: the plan must not depend on threads or build")
                cells.append(f"{result['planning_ms'] / 1e3:.1f} s ({cpu_s:.1f} s)")
            lines.append(f"| {name} | {label} | " + " | ".join(cells) +
                         f" | {first[2]:,} |")
            print(lines[-1], file=sys.stderr)
    today = datetime.date.today().isoformat()
    section = "\n".join([
        BEGIN,
        f"Generated {today} by `bench/plan_threads.py` on {platform.node()} "
        f"({platform.machine()}, {os.cpu_count()} cores). Each cell: `hybrid`'s planning time "
        "(wall, from `--json`) and the CPU time of the whole run, with `--plan-threads` 1 "
        "and 2; every run of a row gave the same plan.",
        "",
        *lines,
        END,
    ])
    if options.print:
        print(section)
    else:
        write_section(BEGIN, END, section, "Planning on several threads")


if __name__ == "__main__":
    main()
