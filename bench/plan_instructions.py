#!/usr/bin/env python3
"""Counts the instructions `hybrid`'s planning executes, for two builds.

An exact saving in the planner (same plans, same candidates) of a few
percent is invisible in wall time on a shared machine, whose speed moves by
20-40% between identical runs (docs/results.md). The number of instructions
a planning run executes does not depend on the machine's load, so this runs
`spillway plan` under valgrind's callgrind (one planner thread, the
wall-clock safety net lifted so that the slowed run still converges),
checks that both builds plan the same (step time, arena, candidates,
layouts), and tabulates the counts. Each run takes about 50 times as long as
the planning itself: about 2 minutes for ResNet-50 and 10 for ResNet-152 or
the 48-layer GPT-2 on a 2-core machine (`--only` picks workloads). Needs
valgrind; standard library only.

  bench/plan_instructions.py --binary NEW --label NAME --baseline OLD
                             --baseline-label NAME [--only resnet50,gpt2] [--print]
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys

from plan_threads import ROOT, WORKLOADS, plan
from results_doc import write_section

BEGIN = "<!-- plan-instructions:begin (bench/plan_instructions.py writes this part) -->"
END = "<!-- plan-instructions:end -->"
COLLECTED = re.compile(r"Collected : (\d+)")


def workload_key(flags):
    """The model's name, for --only."""
    return flags[flags.index("--model") + 1]


def counted_plan(binary, args):
    """The plan's JSON and the instructions the run executed, under callgrind."""
    # spillway re-executes itself to choose OpenMP's wait policy unless it is
    # set; valgrind cannot follow that, and the planner runs no OpenMP.
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    run = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                          binary, "plan", *args, "--plan-threads", "1", "--time-limit",
                          "1000000", "--json"], capture_output=True, text=True, env=env)
    counted = COLLECTED.search(run.stderr)
    if run.returncode != 0 or counted is None:
        sys.exit(f"callgrind on spillway plan {' '.join(args)} failed:\n{run.stderr[-2000:]}")
    return json.loads(run.stdout), int(counted.group(1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=str(ROOT / "build/release/src/cli/spillway"))
    parser.add_argument("--label", default="this build", help="--binary's name in the table")
    parser.add_argument("--baseline", required=True, help="the other build's spillway")
    parser.add_argument("--baseline-label", default="baseline", help="--baseline's name")
    parser.add_argument("--only", help="comma-separated models (resnet50, resnet152, "
                        "deeplabv3plus, gpt2); default: all four")
    parser.add_argument("--print", action="store_true", help="print instead of editing the doc")
    options = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("plan_instructions.py needs valgrind (apt-get install valgrind)")
    only = set(options.only.split(",")) if options.only else None
    lines = [f"| workload | candidates (laid out) | {options.baseline_label} | "
             f"{options.label} | change |", "|---|---|---|---|---|"]
    for name, args, hardware, share in WORKLOADS:
        if only is not None and workload_key(args) not in only:
            continue
        base = [*args, "--hardware", hardware, "--policy", "hybrid"]
        if share is not None:
            none, _ = plan(options.binary, [*args, "--hardware", hardware, "--policy", "none",
                                            "--budget", "1TiB"])
            base += ["--budget", str(none["arena_bytes"] // share)]
        counts = []
        same = None
        for label, binary in [(options.baseline_label, options.baseline),
                              (options.label, options.binary)]:
            print(f"{name}: {label} under callgrind ...", file=sys.stderr, flush=True)
            result, instructions = counted_plan(binary, base)
            planned = (result["step_time_s"], result["arena_bytes"], result["evaluations"],
                       result["laid_out"])
            if same is not None and planned != same:
                sys.exit(f"{name}: {label} planned {planned}, not {same}: the counts compare "
                         "only builds that plan the same")
            same = planned
            counts.append(instructions)
        change = counts[1] / counts[0] - 1
        lines.append(f"| {name} | {same[2]:,} ({same[3]:,}) | {counts[0] / 1e9:.2f} G | "
                     f"{counts[1] / 1e9:.2f} G | {change:+.1%} |")
        print(lines[-1], file=sys.stderr)
    today = datetime.date.today().isoformat()
    section = "\n".join([
        BEGIN,
        f"Generated {today} by `bench/plan_instructions.py` on {platform.node()} "
        f"({platform.machine()}): instructions executed by `spillway plan --policy hybrid "
        "--plan-threads 1` under callgrind (billions), the whole run; both builds made the "
        "same plan after the same candidates and layouts.",
        "",
        *lines,
        END,
    ])
    if options.print:
        print(section)
    else:
        write_section(BEGIN, END, section, "Planning, counted in instructions")


if __name__ == "__main__":
    main()
