#!/usr/bin/env python3
"""The device check's logic (bench/gpu/check.sh runs it): Spillway's policies
trained for real on one GPU, beside the simulator's prediction and beside
PyTorch's own memory options, in one table.

For ResNet-50 at the largest square image (batch 8) whose `none` arena fits
in 80% of the device, so that `none` runs unconstrained as the ideal, every
policy trains at half that arena with `spillway train --backend cuda --json
--trace`: measured step (median of the steps after the first), the
simulator's prediction for the plan, the planned arena, the device memory the
driver reports for the process at its highest, and a Chrome trace of the last
step with the measured streams beside the simulated ones. PyTorch then trains
the same model, size and batch capped at the same budget
(bench/gpu/torch_baseline.py: plain, torch.utils.checkpoint over the stages,
save_on_cpu with pinned memory, and both). Writes OUT/results.json,
OUT/table.md, each run's JSON and trace, and prints the table.

--dry-run runs the same logic on the CPU at a tiny size (ResNet-18 at 64x64,
`--backend cpu --hardware cpu`, PyTorch on the CPU without a cap, no driver
figures), so that CI checks the script without a GPU.

  bench/gpu/check.py OUT [--dry-run] [--binary PATH] [--python PATH] [--steps 4]
"""
import argparse
import json
import pathlib
import shutil
import statistics
import subprocess
import sys
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
POLICIES = ["none", "swap", "recompute", "hybrid-seed", "hybrid"]
TORCH_MODES = ["plain", "checkpoint", "save_on_cpu", "both"]
# Device names as nvidia-smi prints them, and the profile that plans for each.
PROFILES = [("H200", "h200-141g-pcie5"), ("H100", "h100-80g-pcie5"), ("A100", "a100-40g-pcie4"),
            ("V100", "v100-16g-pcie3"), ("GH200", "gh200-96g-c2c")]


def one_line(text):
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1] if lines else "failed"


def run_json(command, timeout):
    """Runs a command whose stdout ends with a JSON object: (object, None) or (None, error)."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"stopped after {timeout} s"
    if done.returncode != 0:
        return None, one_line(done.stderr)
    out = done.stdout
    start = out.find("{")
    try:
        return json.loads(out[start:]), None
    except ValueError:
        return None, f"no JSON in the output: {one_line(out)}"


class DeviceMemory:
    """The most device memory the driver reports for any compute process while it runs."""

    def __init__(self, enabled):
        self.enabled = enabled and shutil.which("nvidia-smi") is not None
        self.peak_mib = 0
        self._stop = threading.Event()
        self._thread = None

    def __enter__(self):
        if self.enabled:
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *args):
        self._stop.set()
        if self._thread:
            self._thread.join()

    def _sample(self):
        while not self._stop.is_set():
            done = subprocess.run(["nvidia-smi", "--query-compute-apps=used_memory",
                                   "--format=csv,noheader,nounits"],
                                  capture_output=True, text=True)
            for line in done.stdout.split():
                if line.strip().isdigit():
                    self.peak_mib = max(self.peak_mib, int(line))
            self._stop.wait(0.2)

    def bytes(self):
        return self.peak_mib * 2**20 if self.enabled else None


def gpu_profile():
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total",
                               "--format=csv,noheader,nounits"], capture_output=True, text=True)
    except FileNotFoundError:
        done = None
    if done is None or done.returncode != 0 or not done.stdout.strip():
        sys.exit("check.py: nvidia-smi finds no GPU here (use --dry-run on a machine without one)")
    name, total_mib = [field.strip() for field in done.stdout.splitlines()[0].split(",")]
    for key, profile in PROFILES:
        if key in name:
            return name, int(total_mib) * 2**20, profile
    sys.exit(f"check.py: no hardware profile for '{name}' (known: "
             f"{', '.join(key for key, _ in PROFILES)})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="folder for the results (created)")
    parser.add_argument("--dry-run", action="store_true", help="the CPU at a tiny size, no GPU")
    parser.add_argument("--binary", default=str(ROOT / "build/ci/src/cli/spillway"))
    parser.add_argument("--python", default=sys.executable, help="the Python with PyTorch")
    parser.add_argument("--steps", type=int, default=4, help="steps per run, the first not counted")
    options = parser.parse_args()
    out = pathlib.Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    if not pathlib.Path(options.binary).exists():
        sys.exit(f"check.py: no spillway binary at {options.binary} (--binary)")

    if options.dry_run:
        device, profile, backend = "CPU (dry run)", "cpu", "cpu"
        model = ["--model", "resnet18", "--image", "64", "--base-width", "8", "--batch", "4"]
        torch_model = ["--model", "resnet18", "--image", "64", "--batch", "4", "--device", "cpu"]
        workload = "ResNet-18 (base width 8), 64x64, batch 4"
        plan, error = run_json([options.binary, "plan", *model, "--hardware", profile,
                                "--policy", "none", "--budget", str(2**50), "--json"], 120)
        if error:
            sys.exit(f"check.py: planning the dry run's workload: {error}")
        none_arena = plan["arena_bytes"]
    else:
        device, device_bytes, profile = gpu_profile()
        backend = "cuda"
        for image in (2048, 1792, 1536, 1280, 1024, 768, 512):
            model = ["--model", "resnet50", "--image", str(image), "--batch", "8"]
            plan, error = run_json([options.binary, "plan", *model, "--hardware", profile,
                                    "--policy", "none", "--budget", str(2**50), "--json"], 120)
            if error:
                sys.exit(f"check.py: planning {' '.join(model)}: {error}")
            if plan["arena_bytes"] <= 0.8 * device_bytes:
                none_arena = plan["arena_bytes"]
                break
        else:
            sys.exit("check.py: even ResNet-50 at 512x512, batch 8, does not fit this GPU")
        torch_model = ["--model", "resnet50", "--image", str(image), "--batch", "8",
                       "--device", "cuda"]
        workload = f"ResNet-50, {image}x{image}, batch 8"
    print(f"check: {workload} on {device} ({profile}), backend {backend}", flush=True)

    # The floor hybrid reaches, so that the budget is one every policy might fit.
    floor, error = run_json([options.binary, "plan", *model, "--hardware", profile,
                             "--policy", "hybrid", "--budget", "1", "--json"], 600)
    if error:
        sys.exit(f"check.py: planning the floor: {error}")
    budget = max(none_arena // 2, floor["smallest_arena_bytes"] + (none_arena // 20))

    rows = []
    for policy in POLICIES:
        policy_budget = 2**50 if policy == "none" else budget
        trace = out / f"trace-{policy}.json"
        command = [options.binary, "train", *model, "--hardware", profile, "--backend", backend,
                   "--policy", policy, "--budget", str(policy_budget),
                   "--steps", str(options.steps), "--json", "--trace", str(trace)]
        print(f"check: spillway {policy}", flush=True)
        with DeviceMemory(not options.dry_run) as memory:
            summary, error = run_json(command, 900)
        row = {"who": "spillway", "what": policy, "budget_bytes": policy_budget,
               "device_memory_bytes": memory.bytes(), "command": " ".join(command)}
        if summary is None:
            row["error"] = error
        else:
            (out / f"spillway-{policy}.json").write_text(json.dumps(summary, indent=2))
            row.update(step_s=statistics.median(summary["step_seconds"][1:]),
                       predicted_step_s=summary["predicted_step_s"],
                       arena_bytes=summary["arena_bytes"], trace=trace.name)
        rows.append(row)

    for mode in TORCH_MODES:
        command = [options.python, str(HERE / "torch_baseline.py"), "--mode", mode, *torch_model,
                   "--steps", str(options.steps)]
        if not options.dry_run:
            command += ["--memory-cap", str(budget)]
        print(f"check: pytorch {mode}", flush=True)
        with DeviceMemory(not options.dry_run) as memory:
            result, error = run_json(command, 900)
        row = {"who": "pytorch", "what": mode, "budget_bytes": None if options.dry_run else budget,
               "device_memory_bytes": memory.bytes(), "command": " ".join(command)}
        if result is None:
            row["error"] = error
        elif "skipped" in result:
            row["error"] = result["skipped"]
        elif result.get("oom"):
            row["error"] = f"out of memory: {result.get('error', '')}"
        else:
            row.update(step_s=result["step_s"], arena_bytes=result.get("max_allocated_bytes"))
        rows.append(row)

    ideal = next((r.get("step_s") for r in rows if r["what"] == "none" and "step_s" in r), None)
    ideal_predicted = next((r.get("predicted_step_s") for r in rows
                            if r["what"] == "none" and "predicted_step_s" in r), None)

    def mib(value):
        if value is None:
            return "-"
        return f"{value / 2**30:.2f} GiB" if value >= 2**30 else f"{value / 2**20:.1f} MiB"

    def overhead(step, base):
        return "-" if step is None or not base else f"{100 * (step / base - 1):+.1f}%"

    lines = [f"{workload} on {device} (profile `{profile}`), budget {mib(budget)} for every "
             f"row but `none` (unconstrained, {mib(none_arena)} arena); {options.steps} steps "
             "a run, the first not counted.",
             "",
             "| run | step (s) | over `none` | predicted (s) | predicted over `none` | "
             "arena or PyTorch's peak allocation | device memory (driver) | note |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        step = row.get("step_s")
        predicted = row.get("predicted_step_s")
        lines.append(
            f"| {row['who']} {row['what']} | {'-' if step is None else f'{step:.4f}'} | "
            f"{overhead(step, ideal)} | {'-' if predicted is None else f'{predicted:.4f}'} | "
            f"{overhead(predicted, ideal_predicted)} | {mib(row.get('arena_bytes'))} | "
            f"{mib(row.get('device_memory_bytes'))} | {row.get('error', '')} |")
    table = "\n".join(lines)
    (out / "table.md").write_text(table + "\n")
    (out / "results.json").write_text(json.dumps(
        {"device": device, "profile": profile, "backend": backend, "workload": workload,
         "budget_bytes": budget, "none_arena_bytes": none_arena, "dry_run": options.dry_run,
         "date": time.strftime("%Y-%m-%d"), "rows": rows}, indent=2))
    print(table)
    # The dry run checks the script: every Spillway run must have worked.
    failed = [row for row in rows if row["who"] == "spillway" and "error" in row]
    if options.dry_run and failed:
        sys.exit("check.py: dry run: " + "; ".join(f"{r['what']}: {r['error']}" for r in failed))


if __name__ == "__main__":
    main()
