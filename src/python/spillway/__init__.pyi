# Type stubs of the spillway package (its extension, spillway._spillway).
from os import PathLike
from typing import Any, Callable, Literal, Sequence

import numpy as np
import numpy.typing as npt

WAIT_POLICY: str

class Error(Exception):
    """A bad workload, option, file or budget: the CLI's one-line message."""

class Workload:
    def __init__(
        self,
        *,
        model: str | None = ...,
        onnx: str | PathLike[str] | None = ...,
        graph: str | PathLike[str] | None = ...,
        input_shape: str | Sequence[str] | None = ...,
        loss: str | None = ...,
        freeze: str | Sequence[str] | None = ...,
        graph_duration: str | None = ...,
        graph_size: str | None = ...,
        graph_time_unit: str | None = ...,
        batch: int | None = ...,
        image: int | None = ...,
        height: int | None = ...,
        width: int | None = ...,
        classes: int | None = ...,
        in_channels: int | None = ...,
        base_width: int | None = ...,
        backbone: str | None = ...,
        depth: int | None = ...,
        dropout: float | None = ...,
        seed: int | None = ...,
        layers: int | None = ...,
        heads: int | None = ...,
        d_model: int | None = ...,
        seq_len: int | None = ...,
        vocab: int | None = ...,
    ) -> None: ...
    def describe(self) -> str: ...

class PlanResult:
    # The fields of `spillway plan --json` (docs/planner.md), among them:
    policy: str
    feasible: bool
    budget_bytes: int
    arena_bytes: int
    smallest_arena_bytes: int
    step_time_s: float
    none_step_time_s: float
    overhead: float
    d2h_bytes: int
    h2d_bytes: int
    recompute_flops: int
    compute_stall_s: float
    spilled_tensors: int
    recomputed_tensors: int
    evaluations: int
    converged: bool
    def __getattr__(self, name: str) -> Any: ...
    def to_dict(self) -> dict[str, Any]: ...
    def write_trace(self, path: str) -> None: ...
    def write_memory_plot(self, path: str) -> None: ...
    def write_program(self, path: str) -> None: ...
    def memory_curve(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]: ...

class Sweep:
    # The fields of `spillway sweep --json` (docs/planner.md), among them:
    workload: str
    policy: str
    none_arena_bytes: int
    none_step_time_s: float
    @property
    def points(self) -> list[PlanResult]: ...
    def __getattr__(self, name: str) -> Any: ...
    def to_dict(self) -> dict[str, Any]: ...
    def write_plot(self, path: str) -> None: ...

class Training:
    # The fields of `spillway train --json` (docs/training.md), among them:
    checksum: str
    first_step: int
    last_step: int
    initial_loss: float
    final_loss: float
    arena_bytes: int
    mean_step_s: float
    @property
    def losses(self) -> npt.NDArray[np.float64]: ...
    def __getattr__(self, name: str) -> Any: ...
    def parameters(self) -> dict[str, npt.NDArray[np.float32]]: ...
    def buffers(self) -> dict[str, npt.NDArray[np.float32]]: ...
    def save(self, path: str) -> None: ...
    def to_dict(self) -> dict[str, Any]: ...

def models() -> list[dict[str, Any]]: ...
def hardware_presets() -> list[str]: ...
def hardware(name_or_path: str) -> dict[str, Any]: ...
def plan(
    workload: Workload,
    *,
    policy: str = "hybrid",
    hardware: str = "v100-16g-nvlink2",
    budget: str | None = None,
    optimizer: str = "sgd",
    math_mode: str = "fp32",
    no_link: bool = False,
    costs: str | None = None,
    bound: bool = False,
    max_evaluations: int = 0,
    refine_passes: int = 3,
    time_limit: float = 300.0,
    plan_threads: int = 0,
    backward_order: Literal["auto", "each", "memory-aware", "lookahead", "topological"] = "auto",
    fetch_once: bool = False,
    progress: bool = True,
) -> PlanResult: ...
def compare(
    workload: Workload,
    *,
    hardware: str = "v100-16g-nvlink2",
    budget: str | None = None,
    optimizer: str = "sgd",
    math_mode: str = "fp32",
    no_link: bool = False,
    costs: str | None = None,
    optimal: bool = False,
    bound: bool = False,
    max_evaluations: int = 0,
    refine_passes: int = 3,
    time_limit: float = 300.0,
    plan_threads: int = 0,
    backward_order: Literal["auto", "each", "memory-aware", "lookahead", "topological"] = "auto",
    fetch_once: bool = False,
    progress: bool = True,
) -> list[PlanResult]: ...

def sweep(
    workload: Workload,
    *,
    policy: str = "hybrid",
    budgets: Sequence[str] | None = None,
    from_share: str | None = None,
    to_share: str | None = None,
    points: int | None = None,
    hardware: str = "v100-16g-nvlink2",
    optimizer: str = "sgd",
    math_mode: str = "fp32",
    no_link: bool = False,
    costs: str | None = None,
    max_evaluations: int = 0,
    refine_passes: int = 3,
    time_limit: float = 300.0,
    plan_threads: int = 0,
    backward_order: Literal["auto", "each", "memory-aware", "lookahead", "topological"] = "auto",
    fetch_once: bool = False,
    progress: bool = True,
) -> Sweep: ...

def write_sweep_plot(path: str, sweeps: Sequence[Sweep]) -> None: ...

def export(workload: Workload, *, checkpoint: str, out: str) -> dict[str, int]: ...

Batch = tuple[npt.ArrayLike, npt.ArrayLike]

def train(
    workload: Workload,
    *,
    steps: int = 20,
    policy: str = "hybrid",
    hardware: str = "cpu",
    budget: str | None = None,
    optimizer: str = "sgd",
    lr: float | None = None,
    momentum: float = 0.9,
    weight_decay: float = 0.0,
    data: str | Batch | Callable[[int], Batch] = "synthetic",
    save: str | None = None,
    save_every: int = 0,
    resume: str | None = None,
    threads: int = 2,
    costs: str | None = None,
    max_evaluations: int = 0,
    refine_passes: int = 3,
    time_limit: float = 300.0,
    plan_threads: int = 0,
    backward_order: Literal["auto", "each", "memory-aware", "lookahead", "topological"] = "auto",
    fetch_once: bool = False,
    progress: bool = False,
) -> Training: ...
