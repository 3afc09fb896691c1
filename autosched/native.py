"""Small C libraries autosched builds on first use with the machine's C compiler.

Two pieces of autosched are a few lines of C that no wheel ships for every machine: the
OpenMP launcher of the CPU kernels' parallel loops (`kernel_pool.py`) and the placeholder
CUDA driver of a GPU-less build host (`measure/cuda/compiler.py`). Each is compiled once
into the user's cache (`$XDG_CACHE_HOME/autosched`, else `~/.cache/autosched`; a temporary
folder when that is not writable), in a folder named by a digest of the source and the
flags, so a changed source is rebuilt and every process of the machine shares one build.
A build is written under a temporary name and renamed into place: a concurrent build or a
kill leaves the old file or the new one, never half of one. The C compiler is `$CC`, else
`cc`, else `gcc`, the one TVM's CPU export links with.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile

from .errors import InfrastructureError


def cache_roots() -> list[str]:
    """Where built libraries go, in order of preference."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return [os.path.join(cache, "autosched"),
            os.path.join(tempfile.gettempdir(), f"autosched-{os.getuid()}")]


def c_compiler() -> str | None:
    """The C compiler's path, or None when the machine has none."""
    return shutil.which(os.environ.get("CC") or "cc") or shutil.which("gcc")


def built_library(name: str, file_name: str, source: str, flags: tuple[str, ...],
                  purpose: str) -> str:
    """Path of `file_name` compiled from `source` with `flags` (a shared object), built
    now unless a build of the same source and flags exists. `purpose` completes "cannot
    build ..." in the one-line error (InfrastructureError) when no compiler or no
    writable folder is found or the compiler fails."""
    digest = hashlib.sha256("\0".join((source, *flags)).encode()).hexdigest()[:12]
    for root in cache_roots():
        folder = os.path.join(root, f"{name}-{digest}")
        path = os.path.join(folder, file_name)
        if os.path.exists(path):
            return path
        try:
            os.makedirs(folder, exist_ok=True)
            return _compile(folder, path, source, flags, purpose)
        except OSError:
            continue  # an unwritable cache: try the next folder
    raise InfrastructureError(f"cannot build {purpose}: no writable folder (tried "
                              f"{' and '.join(cache_roots())})",
                              "make ~/.cache writable (or set XDG_CACHE_HOME), then rerun")


def _compile(folder: str, path: str, source: str, flags: tuple[str, ...],
             purpose: str) -> str:
    cc = c_compiler()
    if cc is None:
        raise InfrastructureError(f"cannot build {purpose}: this machine has no C compiler "
                                  "(cc)", "install a C compiler (gcc), then rerun")
    stem = os.path.join(folder, f".build-{os.getpid()}")
    src, tmp = stem + ".c", stem + ".so"
    with open(src, "w") as f:
        f.write(source)
    try:
        proc = subprocess.run([cc, "-shared", "-fPIC", *flags, "-o", tmp, src],
                              capture_output=True, text=True, check=False)
    finally:
        os.unlink(src)
    if proc.returncode != 0:
        first = next((ln.strip() for ln in proc.stderr.splitlines() if "error" in ln),
                     proc.stderr.strip().splitlines()[0] if proc.stderr.strip() else
                     f"exit status {proc.returncode}")
        raise InfrastructureError(f"{cc} cannot build {purpose}: {first[:300]}",
                                  "check the C compiler, then rerun")
    os.replace(tmp, path)  # atomic: a concurrent build sees the old file or the new one
    return path
