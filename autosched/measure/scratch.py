"""A run's own scratch folder under the work dir, and the cleanup of folders whose run
is gone.

Several runs may share one work dir (two `autosched tune` started from the same
folder use `logs/`). What one run writes while it measures (built libraries, worker
logs, reference data before it is published) lives in its own folder,
``<work_dir>/runs/<pid>-<random>/``, which only that run removes. ``owner.json`` in it
names the owner: host, boot, pid namespace, pid and the process's start time, so that
a pid reused by another process after a crash is not taken for the owner. A later run removes the
folders of owners that are gone (`remove_stale`); a folder whose owner may still live,
or whose owner it cannot check (another host or container), is never touched.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import uuid
from dataclasses import asdict, dataclass

RUNS = "runs"
MARKER = "owner.json"
_REMOVING = ".removing-"  # a stale folder renamed by the one cleaner that deletes it


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def boot_id() -> str | None:
    """This boot of the machine (Linux), so that pids from before a reboot never match."""
    return _read("/proc/sys/kernel/random/boot_id")


def pid_namespace() -> str | None:
    """The pid namespace of this process (Linux): pids mean nothing across containers."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def process_start(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot, from /proc), or None when no
    such process lives (a zombie counts as gone: it runs no more code)."""
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # the command name may hold spaces
    return None if fields[0] in "ZX" else int(fields[19])


@dataclass(frozen=True)
class Owner:
    """The process that made a run folder."""

    pid: int
    start: int | None   # process_start(pid) when it made the folder; None without /proc
    host: str
    boot: str | None
    pidns: str | None  # pid_namespace() of the owner

    @staticmethod
    def current() -> "Owner":
        pid = os.getpid()
        return Owner(pid, process_start(pid), socket.gethostname(), boot_id(),
                     pid_namespace())

    def gone(self) -> bool:
        """True only when the owner has surely ended: on this host, and its pid is free
        or taken by a later process. A run on another host, or in another container
        (pid namespace), cannot be checked: not gone."""
        if self.host != socket.gethostname():
            return False
        if self.pidns != pid_namespace():
            return False
        if self.boot is not None and boot_id() is not None and self.boot != boot_id():
            return True
        if os.path.isdir("/proc/self"):
            now = process_start(self.pid)
            return now is None or (self.start is not None and now != self.start)
        try:  # no /proc: only whether the pid is taken
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
        return False


@dataclass(frozen=True)
class RunFolder:
    """One run's folder: `path` holds `builds/`, `workers/` and unpublished files."""

    path: str

    @property
    def builds(self) -> str:
        return os.path.join(self.path, "builds")

    @property
    def workers(self) -> str:
        return os.path.join(self.path, "workers")

    @staticmethod
    def create(work_dir: str) -> "RunFolder":
        """A new folder under `<work_dir>/runs/`, owned by this process."""
        runs = os.path.join(work_dir, RUNS)
        owner = Owner.current()
        for _ in range(5):  # another run may remove an empty runs/ between the two calls
            os.makedirs(runs, exist_ok=True)
            try:
                path = tempfile.mkdtemp(prefix=f"{owner.pid}-", dir=runs)
                break
            except FileNotFoundError:
                continue
        else:
            raise RuntimeError(f"cannot make a run folder in {runs}")
        tmp = os.path.join(path, f".{MARKER}.tmp")
        with open(tmp, "w") as f:
            json.dump(asdict(owner), f)
        os.rename(tmp, os.path.join(path, MARKER))
        return RunFolder(path)

    def remove(self) -> None:
        """Delete this folder, and `runs/` when no other run has one there."""
        shutil.rmtree(self.path, ignore_errors=True)
        try:
            os.rmdir(os.path.dirname(self.path))
        except OSError:  # another run's folder is there (or it is gone already)
            pass


def owner_of(folder: str) -> Owner | None:
    """The owner a run folder names. Without a marker (its run is still writing it, or
    died before it could) the pid in the folder's name stands for it; None when the
    folder is none of ours."""
    text = _read(os.path.join(folder, MARKER))
    if text is not None:
        try:
            d = json.loads(text)
            return Owner(int(d["pid"]), d["start"], str(d["host"]), d["boot"], d["pidns"])
        except (ValueError, KeyError, TypeError):
            pass
    pid = os.path.basename(folder).split("-", 1)[0]
    if not pid.isdigit():
        return None
    # start unknown: gone only when the pid is free, so a live writer is never removed
    return Owner(int(pid), None, socket.gethostname(), None, pid_namespace())


def remove_stale(work_dir: str) -> list[str]:
    """Delete the run folders under `work_dir` whose owner is gone; returns their paths."""
    runs = os.path.join(work_dir, RUNS)
    try:
        names = sorted(os.listdir(runs))
    except OSError:
        return []
    removed = []
    for name in names:
        folder = os.path.join(runs, name)
        if name.startswith(_REMOVING):  # a cleaner died half-way; nobody uses it
            shutil.rmtree(folder, ignore_errors=True)
            continue
        owner = owner_of(folder)
        if owner is None or not owner.gone():
            continue
        aside = os.path.join(runs, f"{_REMOVING}{uuid.uuid4().hex}")
        try:  # the rename picks one cleaner when several runs start at once
            os.rename(folder, aside)
        except OSError:
            continue
        shutil.rmtree(aside, ignore_errors=True)
        removed.append(folder)
    return removed
