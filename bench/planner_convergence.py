#!/usr/bin/env python3
"""Regenerates the planning-time section of docs/results.md.

Runs `spillway plan --json` (policy `hybrid`, default settings: refine every
start until no move improves) under /usr/bin/time on the workloads whose
planning time the planner's targets name, and on a GPT-2-style model of
growing depth to show how planning time grows with the graph. Reports the
planning time, the candidate plans considered, the planning time per
candidate (wall time over candidates: with the count, it shows whether
depth grows the number of candidates or what each costs), the candidates
laid out, whether the time-limit safety net stopped the refinement, the
start the plan came from, the predicted overhead over `none`, and the
process's peak memory. Standard library only.

  bench/planner_convergence.py [--binary build/release/src/cli/spillway] [--print]
      [--depths 12,24,48]
"""
import argparse
import datetime
import json
import pathlib
import platform
import subprocess
import sys
import tempfile

from results_doc import write_section

ROOT = pathlib.Path(__file__).resolve().parent.parent
BEGIN = "<!-- planner-convergence:begin (bench/planner_convergence.py writes this part) -->"
END = "<!-- planner-convergence:end -->"

# (name, workload flags, hardware, budget: None for the profile's default, or
# a fraction of the `none` arena).
TARGETS = [
    ("ResNet-152, 7500x7500", ["--model", "resnet152", "--image", "7500"], "v100-16g-nvlink2",
     None),
    ("ResNet-50, 8000x8000", ["--model", "resnet50", "--image", "8000"], "v100-16g-nvlink2", None),
    ("DeepLabV3+, 1000x1000, batch 16",
     ["--model", "deeplabv3plus", "--image", "1000", "--batch", "16"], "v100-16g-nvlink2", None),
    ("GPT-2 124M, 48 layers", ["--model", "gpt2", "--layers", "48"], "h200-141g-pcie5", 0.5),
]
SMALL_GPT = ["--model", "gpt2", "--d-model", "128", "--heads", "4", "--seq-len", "256",
             "--vocab", "4096", "--batch", "8"]


def run_json(binary, args):
    out = subprocess.run([binary, *args, "--json"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def plan_timed(binary, args):
    """`spillway plan --json` and the process's peak resident memory in KiB."""
    with tempfile.NamedTemporaryFile("r") as rss:
        out = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss.name, binary, "plan", *args,
                              "--json"], check=True, capture_output=True, text=True)
        return json.loads(out.stdout), int(rss.read().split()[-1])


def budget_args(binary, workload, hardware, fraction):
    if fraction is None:
        return []
    none = run_json(binary, ["plan", *workload, "--hardware", hardware, "--policy", "none",
                             "--budget", "1TiB"])
    return ["--budget", str(int(none["arena_bytes"] * fraction))]


def row(name, result, rss_kib, extra=""):
    stopped = "no" if result["converged"] else "yes"
    per_candidate = result["planning_ms"] / max(result["evaluations"], 1)
    return (f"| {name}{extra} | {result['budget_bytes'] / 2**30:.1f} GiB | "
            f"{result['planning_ms'] / 1e3:.2f} s | {result['evaluations']} | "
            f"{per_candidate:.2f} ms | "
            f"{result['laid_out']} | {stopped} | {result.get('start', '-')} | "
            f"{100 * result['overhead']:+.1f}% | {rss_kib / 1024:.0f} MiB |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=str(ROOT / "build/release/src/cli/spillway"))
    parser.add_argument("--print", action="store_true", help="print instead of editing the doc")
    parser.add_argument("--depths", default="12,24,48",
                        help="layers of the small GPT-2-style model, comma-separated")
    options = parser.parse_args()
    binary = options.binary
    header = ("| workload | budget | planning | candidates | per candidate | laid out | "
              "time limit hit | start | overhead | peak memory |\n"
              "|---|---|---|---|---|---|---|---|---|---|")
    lines = [header]
    for name, workload, hardware, fraction in TARGETS:
        args = [*workload, "--hardware", hardware,
                *budget_args(binary, workload, hardware, fraction)]
        result, rss = plan_timed(binary, args)
        lines.append(row(name, result, rss, f", `{hardware}`"))
        print(lines[-1], file=sys.stderr)
    growth = [header]
    for depth in [int(d) for d in options.depths.split(",")]:
        workload = [*SMALL_GPT, "--layers", str(depth)]
        args = [*workload, "--hardware", "h200-141g-pcie5",
                *budget_args(binary, workload, "h200-141g-pcie5", 0.5)]
        result, rss = plan_timed(binary, args)
        growth.append(row(f"{depth} layers", result, rss))
        print(growth[-1], file=sys.stderr)
    today = datetime.date.today().isoformat()
    section = "\n".join([
        BEGIN,
        f"Generated {today} by `bench/planner_convergence.py --depths {options.depths}` on "
        f"{platform.node()} ({platform.machine()}, {platform.system()}), Release build; "
        "planning times are measured on this machine, overheads are the simulator's predictions.",
        "",
        "\n".join(lines),
        "",
        "A GPT-2-style model (`--d-model 128 --heads 4 --seq-len 256 --vocab 4096 --batch 8`) of "
        "growing depth on `h200-141g-pcie5` at half its `none` arena:",
        "",
        "\n".join(growth),
        END,
    ])
    if options.print:
        print(section)
        return
    write_section(BEGIN, END, section, "Planning time")


if __name__ == "__main__":
    sys.exit(main())
