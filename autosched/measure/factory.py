"""`make_measurer`: a runner name (resolved by `autosched.components.runner_factory`)
plus a local parallel builder become the measurer of a run.

Each measurer has its own scratch folder under the work dir (`scratch.RunFolder`:
built libraries, worker logs), so runs that share a work dir never delete each other's
files; making one first removes the folders of runs that died without cleaning up.
A `BuildRunMeasurer` (a `base.Measurer`) builds a batch of candidates in parallel, hands
only the successful builds to the runner, and returns one MeasureResult per input with
`build_seconds` and `run_seconds` filled. Libraries are deleted once run; `close()` (or
leaving the `with` block) stops every worker and removes the run's folder.

Its `measure_stream` (the loop's path, see `base.measure_chunks`) overlaps: while chunk
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
import tempfile
import time
import weakref

from ..target import TargetSpec
from .base import Builder, BuildArtifact, Observer, Runner, StreamingMeasurer
from .builder import LocalBuilder
from .local_runner import DEVICES
from .result import MeasureResult
from .scratch import RunFolder, remove_stale
from .settings import MeasureInput, MeasureSettings


class BuildRunMeasurer(StreamingMeasurer):
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
        (see the module docstring and `base.StreamingMeasurer`)."""
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


def make_measurer(settings: MeasureSettings, runner: str = "local",
                  work_dir: str | None = None) -> BuildRunMeasurer:
    """A build-then-run measurer for `runner` ("local", "rpc://HOST:PORT/KEY" or "rpc"),
    or for "bundle:DIR" a `bundle_runner.BundleMeasurer` (build here, measure elsewhere).

    `work_dir` keeps the reference data (shared by every run on the same tasks) and,
    while measuring, this run's folder `runs/<pid>-<random>/` with the built libraries
    and worker logs. None: a temporary folder, removed by `close()`. An unknown runner
    name is a UserError.
    """
    from ..components import parse_runner, runner_factory

    make_runner = runner_factory(runner)
    owns = work_dir is None
    work_dir = tempfile.mkdtemp(prefix="autosched-measure-") if owns else work_dir
    os.makedirs(work_dir, exist_ok=True)
    if not owns:
        remove_stale(work_dir)
    folder = RunFolder.create(work_dir)
    try:
        run = make_runner(settings, work_dir, folder.path)
    except BaseException:
        folder.remove()
        if owns:
            shutil.rmtree(work_dir, ignore_errors=True)
        raise
    from .bundle_runner import BundleMeasurer, BundleRunner

    # a bundle is measured elsewhere: its measurer hands it every batch, failures too
    kind = BundleMeasurer if isinstance(run, BundleRunner) else BuildRunMeasurer
    # a local runner times CPU kernels on this machine's cores: no builds beside them
    return kind(LocalBuilder(settings, folder.path), run, work_dir, folder, owns,
                settings.build_workers, overlap_cpu=parse_runner(runner)[0] != "local")


def _unlink(path: str | None) -> None:
    try:
        if path:
            os.unlink(path)
    except OSError:
        pass
