"""`ensure_reference`: a task's reference data, loaded from the work dir or computed by
a reference worker (`job.py`) and published there (layout and inputs: `data.py`).

The files are written in a private folder (the run's scratch folder when it is given)
and the directory appears by an atomic rename, so a directory with a readable
``meta.json`` is complete. Processes that race to create it agree on one: the rename,
and the removal of a stale or partial directory in its way, happen under a lock on
``reference/``, so a complete directory that matches its task is never moved once
anyone may read it.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import uuid
from contextlib import contextmanager

from .data import Reference, load_reference, reference_dir
from .job import compute_reference

# Seconds a reference worker may compute (after its start-up). The CPU reference of a
# 512^3 float16 matmul takes 4.9 s on a 2-core machine, so 2048^3 about 5 minutes and
# 4096^3 about 40: past this limit, which a device reference never comes near.
REFERENCE_TIMEOUT = 1800.0


def _matches(ref: Reference, task) -> bool:
    def specs(entries):
        return [(e["name"], tuple(e["shape"]), e["dtype"]) for e in entries]

    return (specs(ref.meta["inputs"]) == [(s.name, s.shape, s.dtype) for s in task.inputs]
            and specs(ref.meta["outputs"]) == [(s.name, s.shape, s.dtype) for s in task.outputs])


def ensure_reference(task, work_dir: str, seed: int = 0, *,
                     scratch_dir: str | None = None, target=None,
                     timeout: float = REFERENCE_TIMEOUT) -> Reference:
    """The task's reference, loaded from `work_dir` or computed and stored there.
    `scratch_dir` (the run's own folder) holds the files until they are published, so
    a run killed meanwhile leaves nothing in the shared `reference/`, and the reference
    worker's log. `target` (a TargetSpec; None: the CPU) says where the expected
    outputs may be computed (see `device.plan`); the worker gets `timeout`
    seconds. `job.ReferenceFailed` (an InfrastructureError) when it fails,
    dies or runs out of time: nothing is stored then."""
    final = reference_dir(work_dir, task.key, seed)
    found = _usable(final, task, seed)
    if found is not None:
        return found
    parent = os.path.dirname(final)
    os.makedirs(parent, exist_ok=True)
    staging = _staging(parent, scratch_dir)
    tmp = tempfile.mkdtemp(prefix=f".tmp-{task.key}-", dir=staging)
    log_dir = os.path.join(scratch_dir or work_dir, "workers")
    try:
        meta = compute_reference(task, target, tmp, seed, timeout=timeout, log_dir=log_dir)
        return _publish(tmp, final, meta, task, seed)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _usable(directory: str, task, seed: int) -> Reference | None:
    found = load_reference(directory)
    if found is not None and found.meta.get("seed") == seed and _matches(found, task):
        return found
    return None


def _staging(parent: str, scratch_dir: str | None) -> str:
    """Where to write before the rename: the scratch folder if the rename can reach
    `parent` from there (the same filesystem), else `parent` itself."""
    if scratch_dir is None:
        return parent
    os.makedirs(scratch_dir, exist_ok=True)
    return scratch_dir if os.stat(scratch_dir).st_dev == os.stat(parent).st_dev else parent


@contextmanager
def _locked(directory: str):
    """An exclusive lock on `directory`, held by one process at a time."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _publish(tmp: str, final: str, meta: dict, task, seed: int) -> Reference:
    """Rename `tmp` to `final`; if another process got there first, use its files.
    Under the lock, looking at `final` and replacing it is one step for the others."""
    with _locked(os.path.dirname(final)):
        other = _usable(final, task, seed)
        if other is not None:
            return other
        if os.path.lexists(final):  # stale or partial: move it out of the way
            aside = f"{final}.stale-{uuid.uuid4().hex}"
            os.rename(final, aside)
            shutil.rmtree(aside, ignore_errors=True)
        os.rename(tmp, final)
    return Reference(final, meta, created=True)
