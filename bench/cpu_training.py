#!/usr/bin/python3
"""Measures CPU training steps and writes the CPU section of docs/results.md.

ResNet-50 at 224x224, batch 8, on 2 threads: Debian's PyTorch (both memory
formats; the faster is the peer) against `spillway train --policy none` on the
CPU backend, then each memory policy at half the `none` arena against `none`.

Only steady-state steps count. PyTorch times each step after a warm-up step (the mean of N).
Spillway runs once with --steps 1 and once with --steps 1+N: the wall time is
the mean of the second run's steps after the first (its JSON's step_seconds),
and the difference of the two runs' CPU times is N steps without the
first step's primitive creation, and without planning and start-up.

With --costs, the workload is profiled first (`spillway profile`: measured
node times, copies and how copies and kernels slow each other) and every
policy plans with that costs file (`train --costs`); the table then gives
each plan's predicted step beside the measured one. Without it, policies
plan with the `cpu` preset's roofline.

The machine may be shared: each figure is the minimum over --repeats runs,
the runs of every row interleaved, and the load average is printed with the
results. Both sides run with the
same OpenMP wait policy (PASSIVE unless --wait-policy says otherwise: spinning
OpenMP threads take the CPU from the threads they wait for when no core is
idle).

Standard library only; PyTorch is optional (the row says why it is missing).
Run with Debian's Python, whose dist-packages hold python3-torch:

  /usr/bin/python3 bench/cpu_training.py [--binary build/release/src/cli/spillway]
      [--steps 3] [--repeats 1] [--wait-policy PASSIVE] [--policies swap,...] [--costs]
      [--print]
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
import time

from results_doc import write_section

ROOT = pathlib.Path(__file__).resolve().parent.parent
BEGIN = "<!-- cpu-results:begin (bench/cpu_training.py writes this part) -->"
END = "<!-- cpu-results:end -->"

WORKLOAD = ["--model", "resnet50", "--image", "224", "--batch", "8"]
POLICIES = ["swap", "recompute", "hybrid-seed", "hybrid"]

# Runs in a child interpreter so that a missing torch is one failed process
# and its threads are set before it starts. Prints one JSON object.
TORCH_STEP = r"""
import json, sys, time
import torch, torchvision
threads, steps, layout = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
torch.set_num_threads(threads)
torch.manual_seed(0)
fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
model = torchvision.models.resnet50().to(memory_format=fmt)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(8, 3, 224, 224).to(memory_format=fmt)
y = torch.randint(0, 1000, (8,))
loss_fn = torch.nn.CrossEntropyLoss()
def step():
    optimizer.zero_grad(set_to_none=True)
    loss_fn(model(x), y).backward()
    optimizer.step()
step()
walls, cpus = [], []
for _ in range(steps):
    wall, cpu = time.perf_counter(), time.process_time()
    step()
    walls.append(time.perf_counter() - wall)
    cpus.append(time.process_time() - cpu)
print(json.dumps({"version": torch.__version__, "wall": walls, "cpu": cpus}))
"""


def environment(wait_policy):
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if wait_policy != "default":
        env["OMP_WAIT_POLICY"] = wait_policy
    return env


def children_cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_json(command, env):
    """Runs a command printing JSON; returns (json, cpu seconds of the child)."""
    before = children_cpu_seconds()
    out = subprocess.run(command, check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout), children_cpu_seconds() - before


def torch_steps(options, env):
    """Per-step wall and CPU seconds of PyTorch, best memory format; or the reason it is absent."""
    best = None
    for layout in ("channels_last", "contiguous"):
        command = [options.python, "-c", TORCH_STEP, str(options.threads), str(options.steps),
                   layout]
        try:
            result, _ = run_json(command, env)
        except subprocess.CalledProcessError as error:
            lines = error.stderr.strip().splitlines()
            return None, lines[-1] if lines else f"exit status {error.returncode}"
        row = {"layout": layout, "version": result["version"],
               "wall": sum(result["wall"]) / options.steps, "cpu": sum(result["cpu"]) / options.steps}
        if best is None or row["wall"] < best["wall"]:
            best = row
    return best, None


def spillway_steps(options, env, policy, budget, costs=None):
    """Steady-state (wall, cpu, predicted) seconds per step of `spillway train`.

    The wall time is the mean of the steps after the first, as the trainer
    timed them. The CPU time of a process includes planning and the first
    step, so it is the difference between a run of 1 + N steps and a run of 1.
    """
    def train(steps):
        command = [options.binary, "train", *WORKLOAD, "--policy", policy, "--budget", budget,
                   "--threads", str(options.threads), "--steps", str(steps), "--json",
                   *(["--costs", costs] if costs else [])]
        return run_json(command, env)

    _, first_cpu = train(1)
    result, all_cpu = train(1 + options.steps)
    steady = result["step_seconds"][1:]
    return (sum(steady) / len(steady), (all_cpu - first_cpu) / options.steps,
            result["predicted_step_s"])


def attempt(measure):
    """A run's (wall, cpu, predicted) seconds; or the error of a run that failed."""
    try:
        return measure()
    except subprocess.CalledProcessError as error:
        lines = error.stderr.strip().splitlines()
        # "policy P cannot fit ...: the smallest arena it reaches is X; rerun with ..."
        return lines[-1].removeprefix("spillway: error: ").split("; rerun")[0] if lines else "failed"


def keep_best(best, run):
    """The element-wise minimum of two runs' times, an error if either failed."""
    if isinstance(run, str) or isinstance(best, str):
        return best if isinstance(best, str) else run
    return run if best is None else tuple(min(a, b) for a, b in zip(best, run))


def profile(options, env, path):
    """Profiles the workload into a costs file; returns profile's summary lines."""
    command = [options.binary, "profile", *WORKLOAD, "--threads", str(options.threads),
               "--out", path]
    out = subprocess.run(command, check=True, capture_output=True, text=True, env=env)
    # Paths as the repository knows them: the doc must not name this machine's folders.
    return out.stdout.replace(f"{ROOT}/", "").strip().splitlines()


def processor():
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown processor"


def load():
    return ", ".join(f"{value:.1f}" for value in os.getloadavg())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=str(ROOT / "build/release/src/cli/spillway"))
    parser.add_argument("--python", default="/usr/bin/python3",
                        help="interpreter with torch and torchvision")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3, help="steady-state steps per run")
    parser.add_argument("--repeats", type=int, default=1, help="runs per figure (minimum taken)")
    parser.add_argument("--wait-policy", default="PASSIVE",
                        help="OMP_WAIT_POLICY for both sides ('default' leaves it unset: "
                             "libgomp spins in PyTorch; spillway then chooses PASSIVE itself)")
    parser.add_argument("--policies", default=",".join(POLICIES),
                        help="comma-separated policies to compare with none ('' for none)")
    parser.add_argument("--costs", action="store_true",
                        help="profile first and plan every policy with the measured costs")
    parser.add_argument("--print", action="store_true", help="print instead of editing the doc")
    options = parser.parse_args()
    env = environment(options.wait_policy)
    load_before = load()

    plan, _ = run_json([options.binary, "plan", *WORKLOAD, "--policy", "none", "--hardware",
                        "cpu", "--budget", "100GiB", "--json"], env)
    half = str(plan["arena_bytes"] // 2)

    costs, profiled = None, []
    if options.costs:
        costs = str(ROOT / "build" / "cpu_training_costs.json")
        profiled = profile(options, env, costs)

    peer, missing = None, None
    none = None
    policy_names = list(filter(None, options.policies.split(",")))
    policies = {policy: None for policy in policy_names}
    for _ in range(options.repeats):  # interleaved, so that every row sees similar load
        row, missing = torch_steps(options, env)
        if row is not None and (peer is None or row["wall"] < peer["wall"]):
            peer = row
        none = keep_best(none, spillway_steps(options, env, "none", "100GiB", costs))
        for policy in policy_names:
            policies[policy] = keep_best(
                policies[policy],
                attempt(lambda p=policy: spillway_steps(options, env, p, half, costs)))
    load_after = load()

    lines = [
        "| | step (s) | CPU time per step (s) | relative to PyTorch (step) |",
        "|---|---|---|---|",
    ]
    if peer is not None:
        lines.append(f"| PyTorch {peer['version']} ({peer['layout']}) | {peer['wall']:.2f} | "
                     f"{peer['cpu']:.2f} | 1.00 |")
        ratio = f"{none[0] / peer['wall']:.2f}"
    else:
        lines.append(f"| PyTorch | skipped: {missing} | | |")
        ratio = "-"
    lines.append(f"| Spillway, policy none | {none[0]:.2f} | {none[1]:.2f} | {ratio} |")
    planned_with = "the costs file" if costs else "the `cpu` preset's roofline"
    policy_lines = [
        "| policy | step (s) | CPU time per step (s) | overhead vs none (step) | predicted step (s) "
        "| predicted overhead |",
        "|---|---|---|---|---|---|",
        f"| none (arena {int(plan['arena_bytes']) / 2**20:.0f} MiB, budget 100 GiB) | "
        f"{none[0]:.2f} | {none[1]:.2f} | - | {none[2]:.2f} | - |",
    ]
    for policy, result in policies.items():
        if isinstance(result, str):
            policy_lines.append(f"| {policy} | {result} | | | | |")
            continue
        wall, cpu, predicted = result
        policy_lines.append(f"| {policy} | {wall:.2f} | {cpu:.2f} | "
                            f"{100 * (wall / none[0] - 1):+.1f}% | {predicted:.2f} | "
                            f"{100 * (predicted / none[2] - 1):+.1f}% |")

    wait = ("unset" if options.wait_policy == "default" else options.wait_policy)
    section = "\n".join([
        BEGIN,
        f"Measured on this machine: generated {datetime.date.today().isoformat()} by "
        f"`/usr/bin/python3 bench/cpu_training.py --steps {options.steps} "
        f"--repeats {options.repeats}{' --costs' if costs else ''}"
        f"{'' if options.policies == ','.join(POLICIES) else ' --policies ' + options.policies}` on {platform.node()} ({platform.machine()}, "
        f"{os.cpu_count()} CPUs, {processor()}); "
        f"{options.threads} threads, OMP_WAIT_POLICY {wait} on both sides; "
        f"load average {load_before} before and {load_after} after.",
        "",
        f"ResNet-50, 224x224, batch 8, SGD with momentum; steady-state steps (minimum of "
        f"{options.repeats} run(s) of {options.steps} steps):",
        "",
        *lines,
        *([
            "",
            f"Each memory policy at half the `none` arena ({int(half) / 2**20:.0f} MiB), "
            f"planned with {planned_with} (the predicted columns are the simulator's, for "
            f"that plan):",
            "",
            *policy_lines,
            *(["", "The costs file (`spillway profile`, same session):", "",
               *[f"    {line}" for line in profiled]] if profiled else []),
        ] if policies else []),
        END,
    ])
    if options.print:
        print(section)
        return
    write_section(BEGIN, END, section, "Training on the CPU backend")


if __name__ == "__main__":
    sys.exit(main())
