"""`BuildRunMeasurer`: the measurer of every runner that measures now (local, RPC):
a local parallel builder, then the runner.

A `BuildRunMeasurer` (a `base.Measurer`) builds a batch of candidates in parallel, hands
only the successful builds to the runner, and returns one MeasureResult per input with
`build_seconds` and `run_seconds` filled. Libraries are deleted once run; `close()` (or
leaving the `with` block) stops every worker and removes the run's folder (see
`factory.make_measurer`).

Its `measure_stream` (the loop's path) overlaps: while chunk
k runs, the build workers compile chunk k+1, so builds cost no time while runs last at
least as long. Results still come chunk by chunk, in order; a kill loses the chunk
running and the builds of the next, never a result already yielded; a fault of the
machine in either is raised (the next chunk's libraries deleted). Not while CPU kernels
are timed on this machine's cores (a local runner and an `llvm` target): compiling
beside them would slow what is being timed, so there each chunk is built, then run,
unless `overlap_cpu` says otherwise (the RPC runner's CPU is another machine's).
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import time
import weakref

from ..results import MeasureResult
from ..target import TargetSpec
from .base import Builder, BuildArtifact, Measurer, Observer, Runner
from .local_runner import DEVICES
from .scratch import RunFolder
from .settings import MeasureInput


class BuildRunMeasurer(Measurer):
    """Build then run; see the module docstring. `observer` (for tests and benches)
    hears when each build and each chunk's run started and ended."""

    def __init__(self, builder: Builder, runner: Runner, work_dir: str,
                 folder: RunFolder | None = None, owns_work_dir: bool = False,
                 build_workers: int = 1, *, overlap_cpu: bool = False,
                 observer: Observer | None = None):
        self.builder = builder
        self.runner = runner
        self.build_workers = build_workers
        self.work_dir = work_dir
        self.folder = folder
        self.overlap_cpu = overlap_cpu
        self.observer = observer
        self._closed = False
        # also runs at interpreter exit when close() was never called
        self._finalizer = weakref.finalize(self, _shutdown, builder, runner, folder, work_dir,
                                           owns_work_dir)

    @property
    def concurrency(self) -> int:
        """A chunk fills every build worker and every session the runner holds now."""
        return max(1, self.build_workers, self.runner.concurrency)

    def hardware(self, target: TargetSpec) -> dict:
        """The runner's machine for `target` (see `base.Measurer.hardware`)."""
        return self.runner.hardware(target)

    def measure(self, inputs: list[MeasureInput]) -> list[MeasureResult]:
        """One result per input, in order. Failures are results, never exceptions."""
        stream = self.measure_stream([inputs])
        try:
            return next(stream)
        finally:
            stream.close()

    def measure_stream(self, chunks: list[list[MeasureInput]]):
        """Each chunk's results, in order, the next chunk building while one runs
        (see the module docstring and `base.Measurer.measure_stream`)."""
        if self._closed:
            raise RuntimeError("measurer is closed")
        todo = iter(enumerate(chunks))
        queued = []  # (chunk index, inputs, builder batch), at most one ahead
        try:
            for k, inputs in todo:
                queued.append((k, inputs, self.builder.submit(inputs)))
                while queued:
                    k, inputs, batch = queued.pop(0)
                    artifacts = self.builder.collect(batch)
                    self._observe_builds(k, artifacts)
                    try:
                        if inputs and self._overlaps(inputs[0].target):
                            following = next(todo, None)
                            if following is not None:
                                queued.append((*following,
                                               self.builder.submit(following[1])))
                    except BaseException:  # no worker could start: nothing of k runs
                        for art in artifacts:
                            _unlink(art.path)
                        raise
                    yield self._run(k, inputs, artifacts)
        finally:
            for _, _, batch in queued:
                self.builder.cancel(batch)

    def _overlaps(self, target: TargetSpec) -> bool:
        return self.overlap_cpu or DEVICES.get(target.kind) != "cpu"

    def _run(self, k: int, inputs: list[MeasureInput],
             artifacts: list[BuildArtifact]) -> list[MeasureResult]:
        """Run the built candidates of one chunk, then delete their libraries."""
        built = [i for i, a in enumerate(artifacts) if a.ok]
        started = time.monotonic()
        try:
            ran = self.runner.run([inputs[i] for i in built], [artifacts[i] for i in built])
        finally:
            for i in built:
                _unlink(artifacts[i].path)
        if built and self.observer is not None:
            self.observer("run", k, started, time.monotonic())
        results: list[MeasureResult] = [a.failure() if not a.ok else None for a in artifacts]
        for i, result in zip(built, ran, strict=True):
            results[i] = dataclasses.replace(result, build_seconds=artifacts[i].build_seconds)
        return results

    def _observe_builds(self, k: int, artifacts: list[BuildArtifact]) -> None:
        if self.observer is not None:
            for art in artifacts:
                if art.span is not None:
                    self.observer("build", k, *art.span)

    def close(self) -> None:
        """Stop every worker; delete this run's folder (and the work dir if we made it)."""
        self._closed = True
        self._finalizer()

    def __enter__(self) -> "BuildRunMeasurer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _shutdown(builder: Builder, runner: Runner, folder: RunFolder | None, work_dir: str,
              owns_work_dir: bool) -> None:
    try:
        runner.close()
    finally:
        builder.close()
        if folder is not None:
            folder.remove()
        if owns_work_dir:
            shutil.rmtree(work_dir, ignore_errors=True)


def _unlink(path: str | None) -> None:
    try:
        if path:
            os.unlink(path)
    except OSError:
        pass
