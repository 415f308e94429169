#!/usr/bin/env python3
"""Sweeps the host link rate of the paper's machine: the paper's comparison at each.

One of the unknowns behind the gap between the paper's figures and ours is
the AC922's NVLink 2.0 rate: the V100 preset uses 68 GB/s each way
(measured sustained), other AC922 configurations are quoted up to 150 GB/s.
For each rate this writes the V100 profile with that rate (a profile JSON in
a temporary folder), runs `spillway compare --json` on the paper's three
workloads, and writes the speedups of the
paper's heuristic over its swap baseline, and of `hybrid`, into
docs/results.md. Standard library only; the figures are predictions.

  bench/link_sweep.py [--binary build/release/src/cli/spillway] [--print]
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
BEGIN = "<!-- link-sweep:begin (bench/link_sweep.py writes this part) -->"
END = "<!-- link-sweep:end -->"
RATES_GB_S = [16, 25, 34, 68, 100, 150]
WORKLOADS = [
    ("ResNet-50, 8000x8000", ["--model", "resnet50", "--image", "8000"], "15.5%"),
    ("ResNet-152, 7500x7500", ["--model", "resnet152", "--image", "7500"], "15.3%"),
    ("DeepLabV3+, 1000x1000, batch 16",
     ["--model", "deeplabv3plus", "--image", "1000", "--batch", "16"], "12.4%"),
]


def speedup(rows, policy, over):
    a, b = rows[policy], rows[over]
    if not a["feasible"] or not b["feasible"]:
        return "-"
    return f"{100 * (b['step_time_s'] / a['step_time_s'] - 1):+.1f}%"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=str(ROOT / "build/release/src/cli/spillway"))
    parser.add_argument("--print", action="store_true", help="print instead of editing the doc")
    options = parser.parse_args()
    base = json.loads(subprocess.run([options.binary, "hardware", "v100-16g-nvlink2", "--json"],
                                     check=True, capture_output=True, text=True).stdout)
    lines = [
        "| workload | link (GB/s each way) | paper: hybrid over TFLMS | "
        "`hybrid-seed-lms` over `swap-lms` | `hybrid-seed` over `swap` | `hybrid` over `swap-lms` "
        "| `hybrid` over `none` |",
        "|---|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as folder:
        for name, args, paper in WORKLOADS:
            for rate in RATES_GB_S:
                profile = dict(base, name=f"v100-16g-nvlink2-{rate}",
                               description=f"the V100 preset with a {rate} GB/s link",
                               d2h_bandwidth=rate * 1e9, h2d_bandwidth=rate * 1e9)
                path = pathlib.Path(folder) / f"{profile['name']}.json"
                path.write_text(json.dumps(profile))
                print(f"{name} at {rate} GB/s", file=sys.stderr)
                out = subprocess.run([options.binary, "compare", *args, "--hardware", str(path),
                                      "--budget", str(base["device_memory_bytes"] -
                                                      base["reserved_bytes"]), "--json"],
                                     check=True, capture_output=True, text=True).stdout
                rows = {row["policy"]: row for row in json.loads(out)}
                hybrid = rows["hybrid"]
                lines.append(" | ".join([
                    f"| {name}", str(rate), paper,
                    speedup(rows, "hybrid-seed-lms", "swap-lms"), speedup(rows, "hybrid-seed", "swap"),
                    speedup(rows, "hybrid", "swap-lms"),
                    f"{100 * hybrid['overhead']:+.1f}%" if hybrid["feasible"] else "-"]) + " |")
    today = datetime.date.today().isoformat()
    section = "\n".join([
        BEGIN,
        f"Generated {today} by `bench/link_sweep.py` on {platform.node()} ({platform.machine()}, "
        f"{platform.system()}): the V100 profile at its default budget with the host link "
        "set to each rate; predicted by the simulator, not measured.",
        "",
        *lines,
        END,
    ])
    if options.print:
        print(section)
        return
    write_section(BEGIN, END, section, "The link rate, an unknown of the paper's machine")


if __name__ == "__main__":
    sys.exit(main())
