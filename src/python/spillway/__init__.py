"""Spillway: plan and train deep networks whose activations do not fit in memory.

    import spillway
    w = spillway.Workload(model="resnet50", image=8000)
    r = spillway.plan(w, hardware="v100-16g-nvlink2", policy="hybrid")
    print(r.step_time_s, r.overhead)

docs/python.md has the whole interface; the results carry the fields of the
command line's --json, and errors its one-line messages (spillway.Error).
"""

import os as _os


def _libgomp_loaded():
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            return any("libgomp" in line for line in maps)
    except OSError:
        return False


# The CPU backend runs oneDNN on OpenMP (libgomp), which reads OMP_WAIT_POLICY
# once, when it loads. Its default spins idle threads for a while after each
# parallel region, which on a busy machine steals cores from the next kernel;
# the command line runs with PASSIVE, and so do we when it is still possible:
# when the variable is unset and nothing in this process has loaded libgomp
# yet (importing torch first, for example, loads it). Either way results are
# bitwise the same; only speed differs. WAIT_POLICY says what happened.
if "OMP_WAIT_POLICY" in _os.environ:
    WAIT_POLICY = _os.environ["OMP_WAIT_POLICY"] + " (from the environment)"
elif _libgomp_loaded():
    WAIT_POLICY = "libgomp's default (it was loaded before spillway)"
else:
    _os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    WAIT_POLICY = "PASSIVE (set by spillway)"

from ._spillway import (  # noqa: E402
    Error,
    PlanResult,
    Sweep,
    Training,
    Workload,
    compare,
    export,
    hardware,
    hardware_presets,
    models,
    plan,
    sweep,
    train,
    write_sweep_plot,
)

__all__ = [
    "Error",
    "PlanResult",
    "Sweep",
    "Training",
    "WAIT_POLICY",
    "Workload",
    "compare",
    "export",
    "hardware",
    "hardware_presets",
    "models",
    "plan",
    "sweep",
    "train",
    "write_sweep_plot",
]
