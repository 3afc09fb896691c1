"""Small C and C++ libraries autosched builds on first use with the machine's compiler.

Three pieces of autosched are a few lines of C or C++ that no wheel ships for every
machine: the OpenMP launcher of the CPU kernels' parallel loops (`kernel_pool.py`), the
placeholder CUDA driver of a GPU-less build host (`measure/cuda/compiler.py`), and the
C++ call path of CPU kernels in a compiled model (`graph_call.py`, built against
the installed torch and TVM-FFI). Each is compiled once
into the user's cache (`$XDG_CACHE_HOME/autosched`, else `~/.cache/autosched`; a temporary
folder when that is not writable), in a folder named by a digest of the source and the
flags, so a changed source is rebuilt and every process of the machine shares one build.
A build is written under a temporary name and renamed into place: a concurrent build or a
kill leaves the old file or the new one, never half of one. The C compiler is `$CC`, else
`cc`, else `gcc`, the one TVM's CPU export links with; the C++ compiler `$CXX`, else
`c++`, else `g++`.
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


def cxx_compiler() -> str | None:
    """The C++ compiler's path, or None when the machine has none."""
    return shutil.which(os.environ.get("CXX") or "c++") or shutil.which("g++")


def built_library(name: str, file_name: str, source: str, flags: tuple[str, ...],
                  purpose: str, cxx: bool = False, libs: tuple[str, ...] = ()) -> str:
    """Path of `file_name` compiled from `source` (C, or C++ with `cxx`) with `flags`
    and linked with `libs` (a shared object), built now unless a build of the same
    source, flags and libraries exists. `purpose` completes "cannot build ..." in the
    one-line error (InfrastructureError) when no compiler or no writable folder is
    found or the compiler fails."""
    digest = hashlib.sha256("\0".join((source, *flags, *libs)).encode()).hexdigest()[:12]
    for root in cache_roots():
        folder = os.path.join(root, f"{name}-{digest}")
        path = os.path.join(folder, file_name)
        if os.path.exists(path):
            return path
        try:
            os.makedirs(folder, exist_ok=True)
            return _compile(folder, path, source, flags, purpose, cxx, libs)
        except OSError:
            continue  # an unwritable cache: try the next folder
    raise InfrastructureError(f"cannot build {purpose}: no writable folder (tried "
                              f"{' and '.join(cache_roots())})",
                              "make ~/.cache writable (or set XDG_CACHE_HOME), then rerun")


def _compile(folder: str, path: str, source: str, flags: tuple[str, ...],
             purpose: str, cxx: bool, libs: tuple[str, ...]) -> str:
    cc = cxx_compiler() if cxx else c_compiler()
    if cc is None:
        what = "C++ compiler (c++)" if cxx else "C compiler (cc)"
        raise InfrastructureError(f"cannot build {purpose}: this machine has no {what}",
                                  f"install a {what.split(' (')[0]} (gcc), then rerun")
    stem = os.path.join(folder, f".build-{os.getpid()}")
    src, tmp = stem + (".cpp" if cxx else ".c"), stem + ".so"
    with open(src, "w") as f:
        f.write(source)
    try:
        proc = subprocess.run([cc, "-shared", "-fPIC", *flags, "-o", tmp, src, *libs],
                              capture_output=True, text=True, check=False)
    finally:
        os.unlink(src)
    if proc.returncode != 0:
        first = next((ln.strip() for ln in proc.stderr.splitlines() if "error" in ln),
                     proc.stderr.strip().splitlines()[0] if proc.stderr.strip() else
                     f"exit status {proc.returncode}")
        raise InfrastructureError(f"{cc} cannot build {purpose}: {first[:300]}",
                                  f"check the {'C++' if cxx else 'C'} compiler, then rerun")
    os.replace(tmp, path)  # atomic: a concurrent build sees the old file or the new one
    return path
