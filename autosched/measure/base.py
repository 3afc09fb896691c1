"""The measurement interfaces: what a builder produces, what a runner consumes, and the
measurer the tuning loop talks to.

A `Builder` turns scheduled modules into shared libraries on this machine. A `Runner`
takes those libraries (paths to `.so` files) and the task's reference files
(`reference.ensure_reference(task, work_dir)`: inputs, expected outputs, tolerances),
runs each library somewhere (a local worker process, or a remote device over RPC),
checks its outputs and times it. Runners never see a failed build. A `Measurer` is what
the tuning loop holds: build-then-run (`factory.make_measurer`), or a replay of earlier
measurements (`simulated.SimulatedMeasurer`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..target import TargetSpec
from .result import MeasureResult
from .settings import MeasureInput


@dataclass(frozen=True)
class BuildArtifact:
    """A built candidate: the path of its `.so`, or the build failure."""

    path: str | None
    error_kind: str | None = None  # "build_error" | "build_timeout"
    error_msg: str = ""
    build_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    def failure(self) -> MeasureResult:
        """The MeasureResult of a failed build."""
        return MeasureResult.failure(self.error_kind, self.error_msg,
                                     build_seconds=self.build_seconds)


class Builder(Protocol):
    def build(self, inputs: list[MeasureInput]) -> list[BuildArtifact]:
        """One artifact per input, in order; failures are artifacts too, never raised."""

    def close(self) -> None:
        """Stop every worker process."""


class Runner(Protocol):
    concurrency: int  # candidates it runs at once (RPC sessions); 1 for one local worker

    def run(self, inputs: list[MeasureInput],
            artifacts: list[BuildArtifact]) -> list[MeasureResult]:
        """One result per input, in order: latencies of a correct kernel, or the failure
        (`run_error`, `run_timeout`, `wrong_answer`). `run_seconds` is filled; the caller
        fills `build_seconds`. A failed artifact yields its build failure unchanged."""

    def hardware(self, target: TargetSpec) -> dict:
        """The hardware fingerprint of the machine it runs `target`'s candidates on:
        `target.fingerprint` for this machine, the servers' own for RPC."""

    def close(self) -> None:
        """Stop every worker process or connection."""


class Measurer(Protocol):
    """Measures candidates for the tuning loop; a context manager that `close`s."""

    concurrency: int  # candidates measured at once: the loop commits a chunk this size

    def measure(self, inputs: list[MeasureInput]) -> list[MeasureResult]:
        """One result per input, in order. A failure of a candidate is a result; a fault
        of the machine, the toolchain or the simulation log is raised, never a result.
        A bundle's measurer raises `bundle_runner.RoundPending` instead: the batch waits
        in the bundle for the machine that measures it."""

    def hardware(self, target: TargetSpec) -> dict:
        """The fingerprint of the machine it measures `target` on; the loop records
        with it (`TargetSpec.measured_on`)."""

    def close(self) -> None:
        """Stop every worker; remove temporary files."""

    def __enter__(self) -> "Measurer":
        ...

    def __exit__(self, *exc) -> None:
        ...
