"""The Sketch and RuleSet interfaces that per-target rules implement."""
from __future__ import annotations

from typing import Protocol

from .decisions import Decider


class Sketch(Protocol):
    """A schedule with open decisions. `apply` must be deterministic given the decider's
    answers: the same decisions always give the same schedule.

    A sketch with `math_variants` true also schedules the task's fast-math form (see
    `fast_math.py`) when the `fast_math` decision picks it; SearchSpace makes that
    decision before `apply`, for programs that call float32 exp or tanh.

    `prior` is the rule set's belief, before anything is measured, in how often this
    sketch's candidates are worth measuring, relative to the task's other sketches
    (`SearchSpace.priors`): a search draws sketches in proportion to it while a sketch
    has no measurements, then lets the measurements decide. Rule sets' sketches subclass
    this class and so inherit the defaults (False; 1.0, uniform; `program` keeps the
    task's computation)."""

    name: str
    math_variants: bool = False
    prior: float = 1.0

    def program(self, func, decide: Decider):
        """The computation this sketch schedules: the task's own PrimFunc `func` by
        default; a sketch may return a rewritten computation of the same outputs (its
        choice among several forms is a decision, made before `apply`). The same `func`
        and decisions give the same object, not an equal copy: SearchSpace keys what it
        derives from a program (its fast-math form) by the object."""
        return func

    def apply(self, sch, decide: Decider) -> None:  # sch: tvm.s_tir.Schedule
        ...


class RuleSet(Protocol):
    """Per-target rules: which sketches a task gets, and the target's limit check."""

    def sketches(self, task, target) -> list[Sketch]:
        ...

    def check(self, mod, target) -> str | None:
        """None when the scheduled module fits the target's limits, else the reason."""
        ...


class DefaultSketch(Sketch):
    """The unscheduled computation: always a candidate, so tuning never returns a kernel
    slower than the default build (on CPU; GPU rule sets provide their own default)."""

    name = "default"

    def apply(self, sch, decide: Decider) -> None:
        return None
