"""The measurement interfaces: what a builder produces, what a runner consumes, and the
measurer the tuning loop talks to.

A `Builder` turns scheduled modules into shared libraries on this machine. A `Runner`
takes those libraries (paths to `.so` files) and the task's reference files
(`reference.store.ensure_reference(task, work_dir)`: inputs, expected outputs,
tolerances), runs each library somewhere (a local worker process, or a remote device
over RPC), checks its outputs and times it. Runners never see a failed build. A `Measurer` is what
the tuning loop holds: build-then-run (`build_run.BuildRunMeasurer`, made by
`factory.make_measurer`), a replay of earlier measurements
(`simulated.SimulatedMeasurer`), or a bundle measured on another machine
(`bundle.runner.BundleMeasurer`).

Measuring returns futures, as MetaSchedule's `Runner.run(inputs) -> [RunnerFuture]`
does: a measurer that measures here and now returns its `MeasureResult`s, which are
futures already done; one whose results come from another machine returns `Pending`
futures that a later run collects (`Measurer.collect`). The loop records what is done
and leaves a task whose results are pending for that later run, whatever the measurer.
The loop measures a batch chunk by chunk and commits each chunk's results as they come
(`Measurer.measure_stream`); a measurer that can do better than one `measure` call per
chunk (the build-then-run one builds the next chunk while the current one runs)
overrides it.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, Generator, Protocol

from ..results import MeasureResult
from ..target import TargetSpec
from .settings import MeasureInput


@dataclass(frozen=True)
class BuildArtifact:
    """A built candidate: the path of its `.so`, or the build failure."""

    path: str | None
    error_kind: str | None = None  # "build_error" | "build_timeout"
    error_msg: str = ""
    build_seconds: float = 0.0
    # when the build ran: (start, end) on this machine's monotonic clock, which the build
    # workers share with their parent (None: never sent to a worker)
    span: tuple[float, float] | None = None

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    def failure(self) -> MeasureResult:
        """The MeasureResult of a failed build."""
        return MeasureResult.failure(self.error_kind, self.error_msg,
                                     build_seconds=self.build_seconds)


class Builder(Protocol):
    def build(self, inputs: list[MeasureInput]) -> list[BuildArtifact]:
        """One artifact per input, in order; failures are artifacts too, never raised
        (a fault of the machine is: `InfrastructureError`, no library kept)."""

    def submit(self, inputs: list[MeasureInput]) -> object:
        """Start building `inputs` and return at once: a batch to `collect` or `cancel`."""

    def collect(self, batch: object) -> list[BuildArtifact]:
        """Wait for a submitted batch; what `build` returns or raises for it."""

    def cancel(self, batch: object) -> None:
        """Give up a submitted batch and delete its libraries."""

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


class MeasureFuture(Protocol):
    """The outcome of measuring one candidate, now or later. A `MeasureResult` is the
    future of a measurement already done (`done()` is True, `result()` is itself)."""

    def done(self) -> bool:
        """Whether the result is known in this run."""

    def result(self) -> MeasureResult:
        """The result of a done future."""


@dataclass(frozen=True)
class Pending:
    """A candidate handed to another machine: its result is recorded by a later run
    (`where` says where it waits)."""

    where: str

    def done(self) -> bool:
        return False

    def result(self) -> MeasureResult:
        raise RuntimeError(f"no result yet: the candidate waits in {self.where}")


class Measurer(ABC):
    """Measures candidates for the tuning loop; a context manager that `close`s.

    Every measurer has the methods around a run (`check_run`, `collect`, `budget`,
    `finish_run`): for one that measures now they do nothing; a bundle's check that it
    belongs to the command, record the results of the last round and write the next.
    """

    concurrency: int = 1  # candidates measured at once: the loop commits a chunk this size

    @abstractmethod
    def measure(self, inputs: list[MeasureInput]) -> list[MeasureFuture]:
        """One future per input, in order. A failure of a candidate is a result; a fault
        of the machine, the toolchain or the simulation log is raised, never a result."""

    def measure_stream(self, chunks: list[list[MeasureInput]]
                       ) -> Generator[list[MeasureFuture], None, None]:
        """Each chunk's futures, in order, as soon as that chunk is measured, like
        `measure(chunk)` would return them; closing the generator early gives up the
        chunks not yet yielded (nothing of them is kept)."""
        for chunk in chunks:
            yield self.measure(chunk)

    def settle(self, inputs: list[MeasureInput],
               results: list[MeasureResult]) -> list[MeasureFuture]:
        """Futures of results known without measuring (limit-check failures): the
        results themselves, unless the batch's other results come from another machine;
        then these wait with them, so every record of a round carries its machine."""
        return list(results)

    @abstractmethod
    def hardware(self, target: TargetSpec) -> dict:
        """The fingerprint of the machine it measures `target` on; the loop records
        with it (`TargetSpec.measured_on`)."""

    def check_run(self, tasks, target: TargetSpec, versions: dict) -> None:
        """Refuse (a UserError) results of earlier runs that belong to another command."""

    def collect(self, db, tasks, target: TargetSpec, versions: dict,
                retry=()) -> tuple[list, dict]:
        """Record the results that earlier runs left pending and are now measured:
        (records added, {task key: [(Candidate, MeasureResult)]} to learn from)."""
        return [], {}

    def budget(self, trials: int) -> int:
        """How many of `trials` this run may hand out: all, for a measurer that
        measures now."""
        return trials

    def finish_run(self, tasks, target: TargetSpec, versions: dict,
                   trials: int) -> str | None:
        """After the loop: hand over what is pending; one line saying what to do next
        (None: nothing to do)."""
        return None

    def close(self) -> None:
        """Stop every worker; remove temporary files."""

    def __enter__(self) -> "Measurer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# (what, chunk, start, end): "build" for each candidate built, "run" for each chunk that
# ran, chunks counted from 0 in each stream, times on this machine's monotonic clock
Observer = Callable[[str, int, float, float], None]
