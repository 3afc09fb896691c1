"""The bundle directory: one round of built candidates for a machine that `autosched
tune` cannot reach, and the results that machine writes back.

```
DIR/manifest.json          the current round (written last, atomically, by `tune`)
DIR/lib/<id>.so            the library of each candidate of the round that built
DIR/reference/<task key>/  each task's reference data (reference/data.py's layout); for a
                           task above `bundle_reference_mib`, made on the measuring
                           machine from its recipe (target_reference.py)
DIR/recipes/<task key>/    such a task's recipe and reference kernels (recipe.py)
DIR/results/<id>.json      one file a candidate, written atomically by the measuring
                           machine (`python -m autosched.measure.bundle DIR`)
DIR/.lock                  held by the one process working on DIR
```

The manifest names the format, the round, the tasks, the target, the versions the
libraries were built with, the measurement settings, the trials of every round so far
(`spent`) and each candidate: its id, task key, candidate JSON, library (None when it
failed to build or to fit the target's limits: then `known` holds that failure), and
since format 2 the round's baseline jobs (`baselines`, see baselines.py: torch timed
beside the kernels; a format-1 manifest, which has none, is still read). A result file
names its candidate (or job) the same way, so results stay readable after later rounds
replace the manifest. This module is plain data and files: the measuring side
imports it without TVM.
"""
from __future__ import annotations

import fcntl
import json
import os
import tempfile

from ...errors import UserError

FORMAT = 2  # 2: a round may carry baseline jobs, which a format-1 measurer would skip
READABLE = (1, 2)
MANIFEST = "manifest.json"
LIB, REFERENCE, RESULTS, RECIPES = "lib", "reference", "results", "recipes"
_TMP = ".tmp-"  # prefix of a file being written; never read as a result


class BundleError(UserError):
    """The directory is not a bundle this command can use (exit 2, one line)."""


def write_json(path: str, data: dict) -> None:
    """Write `data` to `path` so that a reader sees the old file or the whole new one,
    never a part, even when the writer is killed: a private file, fsync, rename."""
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=_TMP, suffix=".json", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise
    _fsync_dir(directory)


def read_json(path: str) -> dict | None:
    """The JSON object in `path`, or None when there is none (missing or unreadable)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_manifest(directory: str) -> dict | None:
    """The manifest of the bundle in `directory`; None when it has none yet. A manifest
    of another format is a BundleError."""
    path = os.path.join(directory, MANIFEST)
    if not os.path.exists(path):
        return None
    manifest = read_json(path)
    if manifest is None or "candidates" not in manifest:
        raise BundleError(f"{directory}: {MANIFEST} is not a bundle manifest")
    if manifest.get("format") not in READABLE:
        raise BundleError(f"{directory}: bundle format {manifest.get('format')!r}, this "
                          f"autosched reads formats {READABLE[0]} to {READABLE[-1]}; build a "
                          "new bundle")
    return manifest


def require_bundle(directory: str) -> dict:
    """The manifest of an existing bundle; BundleError for anything else."""
    if not os.path.isdir(directory):
        raise BundleError(f"{directory}: no such bundle directory")
    manifest = read_manifest(directory)
    if manifest is None:
        raise BundleError(f"{directory}: not a bundle (no {MANIFEST}); build one with "
                          "`autosched tune OP --runner bundle:DIR`")
    return manifest


def result_path(directory: str, cid: str) -> str:
    return os.path.join(directory, RESULTS, f"{cid}.json")


def read_results(directory: str) -> dict[str, dict]:
    """Every complete result file in the bundle, by candidate id."""
    folder = os.path.join(directory, RESULTS)
    try:
        names = sorted(os.listdir(folder))
    except FileNotFoundError:
        return {}
    out = {}
    for name in names:
        if name.endswith(".json") and not name.startswith(_TMP):
            data = read_json(os.path.join(folder, name))
            if data is not None and "result" in data:
                out[name[:-5]] = data
    return out


def pending(directory: str, manifest: dict) -> list[dict]:
    """The candidates of the manifest's round that have no result yet, in order."""
    done = read_results(directory)
    return [c for c in manifest["candidates"] if c["id"] not in done]


def one_machine(results, directory: str) -> dict | None:
    """The fingerprint every result was measured on; None without results. Results from
    different machines are a BundleError: a database must never mix them under one key."""
    first = None
    for r in results:
        if first is None:
            first = r
        elif r["hardware"] != first["hardware"]:
            raise BundleError(f"{directory}: results {first['id']} and {r['id']} were "
                              f"measured on different machines ({_describe(first)} vs "
                              f"{_describe(r)}); measure one bundle on one kind of machine")
    return None if first is None else first["hardware"]


def _describe(result: dict) -> str:
    hw = result["hardware"]
    return f"{hw.get('name') or hw.get('model')} on {result.get('host', '?')}"


def remove_partial(directory: str) -> None:
    """Delete the private files of writes that were killed before their rename (called
    under the lock, so no write of another process is in flight)."""
    for folder in (directory, os.path.join(directory, RESULTS)):
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            continue
        for name in names:
            if name.startswith(_TMP) and name.endswith(".json"):
                _unlink(os.path.join(folder, name))


class BundleLock:
    """DIR/.lock, held while one tuner or measurer works on a bundle; a second process
    is refused (BundleError) instead of waiting behind a measurement of hours."""

    def __init__(self, directory: str):
        self.directory = directory
        self._fd: int | None = None

    def acquire(self) -> BundleLock:
        try:
            fd = os.open(os.path.join(self.directory, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise BundleError(f"{self.directory}: cannot write in the bundle "
                              f"({e.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise BundleError(f"{self.directory}: another process is working on this "
                              "bundle; wait for it to finish") from None
        except OSError:
            pass  # a filesystem without locks (some NFS mounts): nothing to guard with
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the lock
            self._fd = None

    def __enter__(self) -> BundleLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
