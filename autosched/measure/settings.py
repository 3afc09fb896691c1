"""Measurement settings and inputs (plain data shared by builders and runners)."""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: measurement data must not import the compiler
    from search_space import Candidate

    from ..target import TargetSpec
    from ..task import Task


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity mask, which a batch system or
    `taskset` narrows): one build worker each by default, as a compiler (nvcc, LLVM)
    keeps about one core busy."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class MeasureSettings:
    """How candidates are built and timed. Stored with every record (provenance)."""

    # calls per repeat: one, since `min_repeat_ms` grows it for any kernel faster than
    # that; five made every repeat of a slow candidate (a 0.4 s default matmul) run five
    # times, 7 s of the first round
    number: int = 1
    repeat: int = 3            # repeats; the median of these is the latency
    min_repeat_ms: int = 20    # grow `number` until one repeat takes this long
    warmup: int = 1            # untimed calls before timing
    build_timeout: float = 60.0
    run_timeout: float = 30.0
    build_workers: int = field(default_factory=usable_cores)
    check_correctness: bool = True
    reference_timeout: float = 1800.0  # computing a task's expected outputs, once per task
    # `--runner bundle:DIR`: the largest reference data (a task's inputs and outputs, in
    # MiB) a bundle carries as arrays; above it, the inputs' recipe and a reference kernel
    # that the measuring machine runs (see bundle/recipe.py)
    bundle_reference_mib: float = 8.0
    # CUDA only (see cuda/timing.py): flush L2 before each timed call; the stream kernels
    # run on ("runner": the run worker's own non-blocking stream; "default": stream 0)
    flush_l2: bool = True
    stream: str = "runner"
    # CPU, local runner: time each candidate as a torch model calls it, alternating with
    # torch's operator for the same computation (beside_torch.py). "module:function" of
    # the factory that, given (workload, args), returns torch's callable; "" times the
    # kernel alone. `tune-model` sets it, so a model's records hold as called.
    beside: str = ""

    def __post_init__(self):
        from .cuda.timing import STREAMS

        if self.stream not in STREAMS:
            raise ValueError(f"stream must be one of {', '.join(STREAMS)}, got {self.stream!r}")

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, eq=False)
class MeasureInput:
    """One candidate to measure: its task (`Task`), target (`TargetSpec`), candidate
    (`search_space.Candidate`; None for a module measured outside a search) and the
    scheduled IRModule. `baseline` is the module of the task's default candidate (None:
    the task's unscheduled function, the default on the CPU): a builder builds it when a
    failure could be the machine's, to tell (see `faults.py`)."""

    task: Task
    target: TargetSpec
    candidate: Candidate | None
    mod: Any
    baseline: Any = None
