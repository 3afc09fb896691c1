"""The measurement interfaces: what a builder produces, what a runner consumes, and the
measurer the tuning loop talks to.

A `Builder` turns scheduled modules into shared libraries on this machine. A `Runner`
takes those libraries (paths to `.so` files) and the task's reference files
(`reference.ensure_reference(task, work_dir)`: inputs, expected outputs, tolerances),
runs each library somewhere (a local worker process, or a remote device over RPC),
checks its outputs and times it. Runners never see a failed build. A `Measurer` is what
the tuning loop holds: build-then-run (`factory.make_measurer`), or a replay of earlier
measurements (`simulated.SimulatedMeasurer`).

The loop measures a batch chunk by chunk and commits each chunk's results as they come
(`measure_chunks`): a measurer that can do better than one `measure` call per chunk (the
build-then-run one builds the next chunk while the current one runs) is a
`StreamingMeasurer`; any other measurer needs only `measure`.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, Generator, Protocol

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


# (what, chunk, start, end): "build" for each candidate built, "run" for each chunk that
# ran, chunks counted from 0 in each stream, times on this machine's monotonic clock
Observer = Callable[[str, int, float, float], None]


class StreamingMeasurer(ABC):
    """A measurer that measures a batch's chunks better together than one at a time."""

    @abstractmethod
    def measure_stream(self, chunks: list[list[MeasureInput]]
                       ) -> Generator[list[MeasureResult], None, None]:
        """Each chunk's results, in order, as soon as that chunk is measured, like
        `measure(chunk)` would return them; closing the generator early gives up the
        chunks not yet yielded (nothing of them is kept)."""


def measure_chunks(measurer: Measurer, chunks: list[list[MeasureInput]]
                   ) -> Generator[list[MeasureResult], None, None]:
    """Each chunk's results, in order, as soon as it is measured: the measurer's own
    stream where it is a `StreamingMeasurer`, else one `measure` call per chunk (every
    other measurer: a replay, a test's, a wrapper). Close it when done early."""
    if isinstance(measurer, StreamingMeasurer):
        return measurer.measure_stream(chunks)
    return (measurer.measure(chunk) for chunk in chunks)
