"""`make_measurer`: a runner name (resolved by `runners.runner_factory`)
plus a local parallel builder become the measurer of a run: a `build_run.BuildRunMeasurer`,
or a `bundle.runner.BundleMeasurer` for a bundle.

Each measurer has its own scratch folder under the work dir (`scratch.RunFolder`:
built libraries, worker logs), so runs that share a work dir never delete each other's
files; making one first removes the folders of runs that died without cleaning up.
"""
from __future__ import annotations

import os
import shutil
import tempfile

from .base import Measurer
from .build_run import BuildRunMeasurer
from .builder import LocalBuilder
from .runners import parse_runner, runner_factory
from .scratch import RunFolder, remove_stale
from .settings import MeasureSettings


def make_measurer(settings: MeasureSettings, runner: str = "local",
                  work_dir: str | None = None) -> Measurer:
    """A build-then-run measurer for `runner` ("local", "rpc://HOST:PORT/KEY" or "rpc"),
    or for "bundle:DIR" a `bundle.runner.BundleMeasurer` (build here, measure elsewhere).

    `work_dir` keeps the reference data (shared by every run on the same tasks) and,
    while measuring, this run's folder `runs/<pid>-<random>/` with the built libraries
    and worker logs. None: a temporary folder, removed by `close()`. An unknown runner
    name is a UserError.
    """
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
    from .bundle.runner import BundleMeasurer, BundleRunner

    # a bundle is measured elsewhere: its measurer hands it every batch, failures too
    kind = BundleMeasurer if isinstance(run, BundleRunner) else BuildRunMeasurer
    # a local runner times CPU kernels on this machine's cores: no builds beside them
    return kind(LocalBuilder(settings, folder.path), run, work_dir, folder, owns,
                settings.build_workers, overlap_cpu=parse_runner(runner)[0] != "local")
