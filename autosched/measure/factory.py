"""`make_measurer`: the one place a runner name becomes objects.

A Measurer builds a batch of candidates in parallel, hands only the successful builds
to the runner, and returns one MeasureResult per input with `build_seconds` and
`run_seconds` filled. Libraries are deleted once run; `close()` (or leaving the `with`
block) stops every worker and removes the temporary files.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import weakref
from typing import Callable

from ..errors import UserError
from .base import Builder, Runner
from .builder import LocalBuilder
from .local_runner import LocalRunner
from .result import MeasureResult
from .settings import MeasureInput, MeasureSettings


def _local_runner(settings: MeasureSettings, work_dir: str, address: str) -> Runner:
    if address:
        raise UserError(f"--runner local takes no address, got 'local://{address}'")
    return LocalRunner(settings, work_dir)


def _rpc_runner(settings: MeasureSettings, work_dir: str, address: str) -> Runner:
    from .rpc_runner import RPCRunner
    from .rpc_tracker import parse_rpc_address

    # plain "rpc": the tracker and key come from TVM_TRACKER_HOST / _PORT / _KEY
    return RPCRunner(settings, work_dir, parse_rpc_address(address, os.environ))


# Runner scheme -> factory(settings, work_dir, address). "local" or "local://";
# "rpc://HOST:PORT/KEY" maps to scheme "rpc" with address "HOST:PORT/KEY".
RUNNERS: dict[str, Callable[[MeasureSettings, str, str], Runner]] = {
    "local": _local_runner,
    "rpc": _rpc_runner,
}


def parse_runner(name: str) -> tuple[str, str]:
    """'local' -> ('local', ''); 'rpc://h:9190/key' -> ('rpc', 'h:9190/key')."""
    scheme, sep, address = (name or "").strip().partition("://")
    return scheme, address if sep else ""


class Measurer:
    """Build then run; see the module docstring."""

    def __init__(self, builder: Builder, runner: Runner, work_dir: str, owns_work_dir: bool):
        self.builder = builder
        self.runner = runner
        self.work_dir = work_dir
        self._closed = False
        # also runs at interpreter exit when close() was never called
        self._finalizer = weakref.finalize(self, _shutdown, builder, runner, work_dir,
                                           owns_work_dir)

    def measure(self, inputs: list[MeasureInput]) -> list[MeasureResult]:
        """One result per input, in order. Failures are results, never exceptions."""
        if self._closed:
            raise RuntimeError("measurer is closed")
        artifacts = self.builder.build(inputs)
        built = [i for i, a in enumerate(artifacts) if a.ok]
        try:
            ran = self.runner.run([inputs[i] for i in built], [artifacts[i] for i in built])
        finally:
            for i in built:
                _unlink(artifacts[i].path)
        results: list[MeasureResult] = [a.failure() if not a.ok else None for a in artifacts]
        for i, result in zip(built, ran, strict=True):
            results[i] = dataclasses.replace(result, build_seconds=artifacts[i].build_seconds)
        return results

    def close(self) -> None:
        """Stop every worker; delete built libraries (and the work dir if we made it)."""
        self._closed = True
        self._finalizer()

    def __enter__(self) -> "Measurer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _shutdown(builder: Builder, runner: Runner, work_dir: str, owns_work_dir: bool) -> None:
    try:
        runner.close()
    finally:
        builder.close()
        shutil.rmtree(os.path.join(work_dir, "workers"), ignore_errors=True)
        if owns_work_dir:
            shutil.rmtree(work_dir, ignore_errors=True)


def make_measurer(settings: MeasureSettings, runner: str = "local",
                  work_dir: str | None = None) -> Measurer:
    """A Measurer for `runner` ("local", "rpc://HOST:PORT/KEY" or "rpc").

    `work_dir` keeps the reference data (reused by later runs on the same tasks) and,
    while measuring, the built libraries and worker logs. None: a temporary folder,
    removed by `close()`. An unknown runner name is a UserError.
    """
    scheme, address = parse_runner(runner)
    factory = RUNNERS.get(scheme)
    if factory is None:
        raise UserError(f"unknown --runner {runner!r}; use one of: "
                        + ", ".join(f"{s}" if s == "local" else f"{s}://..." for s in RUNNERS))
    owns = work_dir is None
    work_dir = tempfile.mkdtemp(prefix="autosched-measure-") if owns else work_dir
    os.makedirs(work_dir, exist_ok=True)
    try:
        run = factory(settings, work_dir, address)
    except BaseException:
        if owns:
            shutil.rmtree(work_dir, ignore_errors=True)
        raise
    return Measurer(LocalBuilder(settings, work_dir), run, work_dir, owns)


def _unlink(path: str | None) -> None:
    try:
        if path:
            os.unlink(path)
    except OSError:
        pass
