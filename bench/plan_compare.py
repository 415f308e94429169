#!/usr/bin/env python3
"""Compares the plans of two planners (two `spillway` binaries) on a fixed grid.

For a change to the planner: does it plan any workload slower, and what does it
do to the candidates it considers? Runs `spillway plan --json` (the default
`hybrid` policy, default options) with both binaries on

  paper   the paper's three workloads on `v100-16g-nvlink2` at its default
          budget and on `h200-141g-pcie5` at a quarter and half of their
          `none` arena, the 48-layer GPT-2 on the H200 at half, and ResNet-50
          224x224 batch 184 on the V100 at 55% (11 plans, about a minute);
  small   the budget-monotonicity grid's four workloads at its 25 budgets,
          the optimality gap's five models on both GPUs at 40% to 90% of
          their `none` arena, and the small GPT-2 of the planning-time table
          at 12, 24 and 48 layers at half (163 plans, a few minutes);

and prints each plan that differs and a summary: plans the same, faster and
slower, and the candidates each planner considered in all. The step times are
the simulator's predictions, so the comparison does not depend on the machine;
the planning times it does not report.

With `--exact` a plan is the same only if its whole `--json` is (the planning
time aside): the check for a change meant to make planning cheaper without
changing any decision, which names the fields that differ. The exit status is
1 if a plan is slower (with `--exact`, if any differs), 2 on bad arguments,
0 otherwise.

  bench/plan_compare.py --baseline OLD_SPILLWAY [--binary NEW_SPILLWAY]
                        [--grid paper|small|all] [--exact]
"""
import argparse
import functools
import json
import pathlib
import subprocess
import sys

from budget_monotonicity import WORKLOADS as MONOTONICITY_WORKLOADS
from budget_monotonicity import budgets as monotonicity_budgets
from optimality_gap import HARDWARE as GAP_HARDWARE
from optimality_gap import WORKLOADS as GAP_WORKLOADS
from plan_results import WORKLOADS as PAPER_WORKLOADS
from planner_convergence import SMALL_GPT

ROOT = pathlib.Path(__file__).resolve().parent.parent
V100 = "v100-16g-nvlink2"
H200 = "h200-141g-pcie5"


class PlanFailed(Exception):
    pass


def plan(binary, args):
    out = subprocess.run([binary, "plan", *args, "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        reason = (out.stderr.strip().splitlines() or ["no message"])[-1]
        raise PlanFailed(f"{binary} plan {' '.join(args)} exited {out.returncode}: {reason}")
    return json.loads(out.stdout)


@functools.cache
def none_arena(binary, workload):
    """The `none` arena of `workload` (a tuple), planned once per workload."""
    return plan(binary, [*workload, "--policy", "none", "--budget", "1TiB"])["arena_bytes"]


def share(binary, workload, fraction):
    return [*workload, "--budget", str(int(none_arena(binary, tuple(workload)) * fraction))]


def paper_cases(binary):
    """(name, plan arguments) of the paper's workloads and two more."""
    cases = []
    for name, workload in PAPER_WORKLOADS:
        cases.append((f"{name}, V100", [*workload, "--hardware", V100]))
        for label, fraction in (("a quarter", 0.25), ("half", 0.5)):
            cases.append((f"{name}, H200 at {label}",
                          share(binary, [*workload, "--hardware", H200], fraction)))
    cases.append(("GPT-2 124M, 48 layers, H200 at half",
                  share(binary, ["--model", "gpt2", "--layers", "48", "--hardware", H200], 0.5)))
    cases.append(("ResNet-50, 224x224, batch 184, V100 at 55%",
                  share(binary, ["--model", "resnet50", "--image", "224", "--batch", "184",
                                 "--hardware", V100], 0.55)))
    return cases


def small_cases(binary):
    cases = []
    for name, workload in MONOTONICITY_WORKLOADS:
        for budget in monotonicity_budgets(binary, workload):
            cases.append((f"{name} at {budget} B", [*workload, "--budget", str(budget)]))
    for name, workload in GAP_WORKLOADS:
        for hardware in GAP_HARDWARE:
            for percent in (40, 50, 60, 70, 80, 90):
                cases.append((f"{name}, {hardware} at {percent}%",
                              share(binary, [*workload, "--hardware", hardware], percent / 100)))
    for layers in (12, 24, 48):
        cases.append((f"small GPT-2, {layers} layers, H200 at half",
                      share(binary, [*SMALL_GPT, "--layers", str(layers), "--hardware", H200],
                            0.5)))
    return cases


def compare(old, new, exact):
    """'same', 'faster' or 'slower', and what to print about it."""
    if old["feasible"] != new["feasible"]:
        return ("faster" if new["feasible"] else "slower"), (
            f"fits: {old['feasible']} -> {new['feasible']}")
    if exact:
        old = {key: value for key, value in old.items() if key != "planning_ms"}
        new = {key: value for key, value in new.items() if key != "planning_ms"}
        if old == new:
            return "same", ""
        fields = sorted(key for key in old.keys() | new.keys() if old.get(key) != new.get(key))
        change = new["step_time_s"] / old["step_time_s"] - 1
        verdict = "slower" if change > 1e-12 else "faster" if change < -1e-12 else "same step"
        return verdict, f"{100 * change:+.3f}%, differs in {', '.join(fields)}"
    if not old["feasible"]:
        return "same", ""
    change = new["step_time_s"] / old["step_time_s"] - 1
    if abs(change) <= 1e-12:
        return "same", ""
    return ("slower" if change > 0 else "faster"), (
        f"{100 * old['overhead']:+.3f}% -> {100 * new['overhead']:+.3f}% over none "
        f"({100 * change:+.3f}%), from {new['start']!r} (was {old['start']!r})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="the spillway binary to compare with")
    parser.add_argument("--binary", default=str(ROOT / "build/release/src/cli/spillway"),
                        help="the spillway binary under test")
    parser.add_argument("--grid", choices=["paper", "small", "all"], default="all")
    parser.add_argument("--exact", action="store_true",
                        help="a plan is the same only if its whole --json is (planning time aside)")
    options = parser.parse_args()
    for binary in (options.baseline, options.binary):
        if not pathlib.Path(binary).is_file():
            print(f"plan_compare: no spillway binary at {binary}", file=sys.stderr)
            return 2

    cases = []
    if options.grid in ("paper", "all"):
        cases += paper_cases(options.baseline)
    if options.grid in ("small", "all"):
        cases += small_cases(options.baseline)
    counts = {"same": 0, "same step": 0, "faster": 0, "slower": 0}
    candidates = [0, 0]
    for number, (name, args) in enumerate(cases, 1):
        print(f"[{number}/{len(cases)}] {name}", file=sys.stderr, flush=True)
        old, new = plan(options.baseline, args), plan(options.binary, args)
        candidates[0] += old["evaluations"]
        candidates[1] += new["evaluations"]
        verdict, detail = compare(old, new, options.exact)
        counts[verdict] += 1
        if verdict != "same":
            print(f"{verdict}: {name}: {detail}", flush=True)
    same = counts["same"] + counts["same step"]
    print(f"{len(cases)} plans: {same} the same"
          + (f" ({counts['same step']} of them with the same step but another plan)"
             if options.exact else "")
          + f", {counts['faster']} faster, {counts['slower']} slower; candidates "
          f"{candidates[0]:,} -> {candidates[1]:,} ({candidates[1] / max(1, candidates[0]):.3f}x)")
    differs = counts["slower"] + (counts["faster"] + counts["same step"] if options.exact else 0)
    return 1 if differs else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except PlanFailed as failure:
        print(f"plan_compare: {failure}", file=sys.stderr)
        sys.exit(1)
