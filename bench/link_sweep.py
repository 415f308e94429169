#!/usr/bin/env python3
"""Sweeps the host link rate of the paper's machine: the paper's comparison at each.

One of the unknowns behind the gap between the paper's figures and ours is
the AC922's NVLink 2.0 rate: the V100 preset uses 68 GB/s each way
(measured sustained), other AC922 configurations are quoted up to 150 GB/s.
For each rate this writes the V100 profile with that rate (a profile JSON in
a temporary folder), runs `spillway compare --json` on the paper's three
workloads, and writes the speedups of the
paper's heuristic over its swap baseline, and of `hybrid`, into
docs/results.md. A second table sweeps the unknowns of the paper's
DeepLabV3+ run (its batch size and backbone; the paper gives neither) at the
preset's rate and at the rate that reproduces the ResNets. Standard library
only; the figures are predictions.

  bench/link_sweep.py [--binary build/release/src/cli/spillway] [--print]
                      [--rates 16,25,...] [--no-deeplab]
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
RATES_GB_S = [16, 25, 26, 28, 34, 68, 100, 150]
# DeepLabV3+ as the paper may have run it: batch sizes around its 16, and the
# deeper backbone, at the preset's rate and at one near the inferred one.
DEEPLAB_VARIANTS = [(batch, "resnet50") for batch in (8, 12, 16, 20, 24)] + [(16, "resnet101")]
DEEPLAB_RATES_GB_S = [28, 68]
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


def write_profile(base, folder, rate):
    """The V100 preset with its host link at `rate` GB/s each way, as a file."""
    profile = dict(base, name=f"v100-16g-nvlink2-{rate}",
                   description=f"the V100 preset with a {rate} GB/s link",
                   d2h_bandwidth=rate * 1e9, h2d_bandwidth=rate * 1e9)
    path = pathlib.Path(folder) / f"{profile['name']}.json"
    path.write_text(json.dumps(profile))
    return path


def compare(binary, base, profile_path, args):
    """`spillway compare --json` at the preset's default budget: rows by policy."""
    out = subprocess.run([binary, "compare", *args, "--hardware", str(profile_path),
                          "--budget", str(base["device_memory_bytes"] - base["reserved_bytes"]),
                          "--json"], check=True, capture_output=True, text=True).stdout
    return {row["policy"]: row for row in json.loads(out)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=str(ROOT / "build/release/src/cli/spillway"))
    parser.add_argument("--print", action="store_true", help="print instead of editing the doc")
    parser.add_argument("--rates", help="comma-separated link rates in GB/s (default: all)")
    parser.add_argument("--no-deeplab", action="store_true",
                        help="leave out the DeepLabV3+ variants (implies --print)")
    options = parser.parse_args()
    rates = [float(r) if "." in r else int(r) for r in options.rates.split(",")] \
        if options.rates else RATES_GB_S
    if options.rates or options.no_deeplab:
        options.print = True  # a partial run never replaces the doc's tables
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
            for rate in rates:
                path = write_profile(base, folder, rate)
                print(f"{name} at {rate} GB/s", file=sys.stderr)
                rows = compare(options.binary, base, path, args)
                hybrid = rows["hybrid"]
                lines.append(" | ".join([
                    f"| {name}", str(rate), paper,
                    speedup(rows, "hybrid-seed-lms", "swap-lms"), speedup(rows, "hybrid-seed", "swap"),
                    speedup(rows, "hybrid", "swap-lms"),
                    f"{100 * hybrid['overhead']:+.1f}%" if hybrid["feasible"] else "-"]) + " |")
        deeplab = [
            "| backbone | batch | link (GB/s each way) | `none` arena | "
            "`hybrid-seed-lms` over `swap-lms` | `hybrid-seed` over `swap` | `hybrid` over `none` |",
            "|---|---|---|---|---|---|---|",
        ]
        for batch, backbone in [] if options.no_deeplab else DEEPLAB_VARIANTS:
            for rate in DEEPLAB_RATES_GB_S:
                path = write_profile(base, folder, rate)
                print(f"DeepLabV3+ {backbone} batch {batch} at {rate} GB/s", file=sys.stderr)
                rows = compare(options.binary, base, path,
                               ["--model", "deeplabv3plus", "--image", "1000", "--batch",
                                str(batch), "--backbone", backbone])
                hybrid = rows["hybrid"]
                deeplab.append(" | ".join([
                    f"| {backbone}", str(batch), str(rate),
                    f"{rows['none']['arena_bytes'] / 2**30:.1f} GiB",
                    speedup(rows, "hybrid-seed-lms", "swap-lms"), speedup(rows, "hybrid-seed", "swap"),
                    f"{100 * hybrid['overhead']:+.1f}%" if hybrid["feasible"] else "-"]) + " |")
    today = datetime.date.today().isoformat()
    section = "\n".join([
        BEGIN,
        f"Generated {today} by `bench/link_sweep.py` on {platform.node()} ({platform.machine()}, "
        f"{platform.system()}): the V100 profile at its default budget with the host link "
        "set to each rate; predicted by the simulator, not measured.",
        "",
        *lines,
        "",
        "DeepLabV3+ at 1000x1000 as the paper may have run it (it gives neither batch size nor "
        "backbone):",
        "",
        *deeplab,
        END,
    ])
    if options.print:
        print(section)
        return
    write_section(BEGIN, END, section, "The link rate, an unknown of the paper's machine")


if __name__ == "__main__":
    sys.exit(main())
