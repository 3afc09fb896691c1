"""Real faults of the machine for the tuning loop's tests: interpreters that cannot
start or run under a file-size limit, a compiler that is missing or broken, a build
folder that is gone, full or not a folder; and a measurer that remembers what it was
asked, so a test can tell that a rerun measures the chunk that a fault interrupted."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from autosched.measure.base import Measurer
from autosched.measure.builder import LocalBuilder
from autosched.measure.build_run import BuildRunMeasurer
from autosched.measure.local_runner import LocalRunner
from autosched.tuner import Callback


class RecordingMeasurer(Measurer):
    """A Measurer that hands every batch to a real one and remembers the candidate keys
    it was asked to measure, in order (`asked`)."""

    def __init__(self, inner):
        self.inner = inner
        self.asked: list[list[str]] = []

    @property
    def concurrency(self) -> int:
        return self.inner.concurrency

    def hardware(self, target):
        return self.inner.hardware(target)

    def measure(self, inputs):
        self.asked.append([i.candidate.key for i in inputs])
        return self.inner.measure(inputs)

    def close(self) -> None:
        self.inner.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def local_measurer(settings, work_dir: str, python: str = sys.executable) -> RecordingMeasurer:
    """Build-then-run on this machine, build workers run by `python`."""
    os.makedirs(work_dir, exist_ok=True)
    builder = LocalBuilder(settings, work_dir, python=python)
    return RecordingMeasurer(BuildRunMeasurer(builder, LocalRunner(settings, work_dir),
                                              work_dir, build_workers=settings.build_workers))


def script(path: Path, body: str) -> str:
    """An executable shell script at `path`; returns its path."""
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(path)


def python_failing_once(folder: Path) -> str:
    """An interpreter that exits 3 the first time it is started, then runs Python."""
    mark = folder / "failed-once"
    return script(folder / "python-once", f'if [ ! -e "{mark}" ]; then touch "{mark}"; '
                                          f'exit 3; fi\nexec "{sys.executable}" "$@"')


def python_with_file_limit(folder: Path, kib: int) -> str:
    """An interpreter whose process (and the compiler it runs) may write no file past
    `kib` KiB (RLIMIT_FSIZE): to a build, the disk is full."""
    return script(folder / "python-fsize", f'ulimit -f {kib}\nexec "{sys.executable}" "$@"')


def broken_compiler_path(folder: Path) -> str:
    """A PATH whose first entry holds a `g++` that fails as a broken toolchain does."""
    bindir = folder / "broken-bin"
    bindir.mkdir()
    script(bindir / "g++", 'echo "g++: internal compiler error: Illegal instruction" >&2\n'
                           "exit 1")
    return f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"


def no_compiler_path(folder: Path) -> str:
    """A PATH with no C/C++ compiler on it (and nothing else)."""
    empty = folder / "empty-bin"
    empty.mkdir()
    return str(empty)


class ReplaceFolderWithFile(Callback):
    """After the first batch, the build folder becomes a regular file: every later
    build fails to write its library (as root, chmod would not stop the writes)."""

    def __init__(self, folder: str):
        self.folder = folder

    def on_batch(self, states, done, budget) -> None:
        if os.path.isdir(self.folder):
            shutil.rmtree(self.folder)
            Path(self.folder).write_text("not a folder\n")

    def undo(self) -> None:
        os.unlink(self.folder)
        os.makedirs(self.folder)


class FullDisk:
    """A 256 KiB tmpfs, filled to the last byte, mounted in place of `folder` (needs
    the right to mount: root in a container that allows it)."""

    def __init__(self, folder: str, mount_point: Path):
        self.folder, self.mount_point = folder, mount_point

    def __enter__(self) -> "FullDisk":
        self.mount_point.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs",
                        str(self.mount_point)], check=True, capture_output=True)
        fd = os.open(self.mount_point / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:  # ENOSPC: full to the last page
            pass
        finally:
            os.close(fd)
        shutil.rmtree(self.folder)
        os.symlink(self.mount_point, self.folder)
        return self

    def __exit__(self, *exc) -> None:
        os.unlink(self.folder)
        os.makedirs(self.folder)
        subprocess.run(["umount", str(self.mount_point)], check=False, capture_output=True)


def can_mount(tmp: Path) -> bool:
    """Whether this process may mount a tmpfs (root with CAP_SYS_ADMIN)."""
    probe = tmp / "mount-probe"
    probe.mkdir()
    ok = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", str(probe)],
                        capture_output=True).returncode == 0
    if ok:
        subprocess.run(["umount", str(probe)], capture_output=True)
    probe.rmdir()
    return ok
