"""PlanOptions: the knobs of profiling and solving, in one object.

plan(), profile_model() and the measured choice (choice.py) take the same knobs: which
modules are the layers, which actions to offer, how often and with which clock to time
them, which kernels and which torch.compile backend to cost them with, how long the
solver may search. They travel together from the entry point down to the function that
uses each, so a new knob is one field here, not a parameter added at every level.

    plan(model, inputs, "40%", options=PlanOptions(compile=True, repeats=3))
    plan(model, inputs, "40%", compile=True, repeats=3)        # the same, as keywords
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

CLOCK_NAMES = ("wall", "cpu", "thread")


@dataclass(frozen=True)
class PlanOptions:
    """layers: modules whose children are the layers, comma-separated (None: the
    automatic rule of layers.py). actions: the action names offered (None: every one that
    applies). allow_offload: offer host offload (None: on CUDA only; on the CPU host and
    device memory are the same RAM). repeats: timed runs per layer and action. clock:
    "wall", "cpu" or "thread" time (measured_step.clock_fn); predictions are in it.
    bandwidth / bandwidth_path: a measured host<->device Bandwidth, or where to cache
    one. kernels: the memory-efficient kernels by kind (memeff.memeff_library_kernels);
    plans are measured with them and must be applied with the same. compile: cost the
    actions as torch.compile runs them, under each layout worth trying; backend: what
    compiles (a registered name, or an autosched kernel library's backend). kernel_ids:
    autosched op names -> the record ids of their kernels, written into the plan.
    time_limit_s / mip_gap: the solver's limits."""
    layers: str | None = None
    actions: tuple | None = None
    allow_offload: bool | None = None
    repeats: int = 5
    clock: str = "wall"
    bandwidth: object = None
    bandwidth_path: object = None
    kernels: dict | None = None
    compile: bool = False
    backend: object = "inductor"
    kernel_ids: dict | None = None
    time_limit_s: float = 10.0
    mip_gap: float = 1e-3

    def __post_init__(self):
        if self.clock not in CLOCK_NAMES:
            raise ValueError(f"clock {self.clock!r}: one of {', '.join(CLOCK_NAMES)}")
        if self.repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {self.repeats}")
        if self.actions is not None and not isinstance(self.actions, tuple):
            object.__setattr__(self, "actions", tuple(self.actions))

    def replace(self, **changes) -> PlanOptions:
        return dataclasses.replace(self, **changes)


def plan_options(options: PlanOptions | None, knobs: dict) -> PlanOptions:
    """`options` (default PlanOptions()) with the keyword knobs a caller passed beside it
    (each a PlanOptions field; an unknown one is a TypeError naming it)."""
    base = options or PlanOptions()
    return base.replace(**knobs) if knobs else base
