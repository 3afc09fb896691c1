"""What made a bench result: command line, commit, versions, seed, machine and time.

Every bench script stamps what it writes, so a result in bench/results can be traced to
the command that remakes it and judged against the code and machine it came from:

    stamp = provenance.stamp(seed=args.seed)      # once, at the start of main()
    provenance.write_json(path, {"rows": rows}, stamp)   # JSON: a top-level "provenance"
    provenance.write_sidecar(png_path, stamp)            # PNG / text: NAME.provenance.json
    print(provenance.header(stamp))                      # stdout that may be redirected

The stamp is taken when the run starts, so `dirty` says whether the code that ran had
uncommitted changes, not whether the results written since are committed.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADER_PREFIX = "# provenance: "
SIDECAR_SUFFIX = ".provenance.json"


def command_line(argv: list[str] | None = None) -> str:
    """The command as one runnable string from the repository root: `python SCRIPT ARGS`."""
    argv = list(sys.argv if argv is None else argv)
    script = Path(argv[0]).resolve() if argv else Path("-")
    try:
        script_text = str(script.relative_to(ROOT))
    except ValueError:
        script_text = str(script)
    return shlex.join(["python", script_text, *argv[1:]])


def git_state(root: Path = ROOT) -> dict:
    """{"commit": HEAD's hash, "dirty": uncommitted changes to tracked files}; both None
    outside a git checkout (an sdist, a copied tree)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True,
                              text=True, check=True, timeout=30).stdout.strip()

    try:
        return {"commit": git("rev-parse", "HEAD"),
                "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def _distribution_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def versions() -> dict:
    """The versions a result depends on: the product's own (as records carry them), the
    search space and feature versions, and the libraries that build, time and learn.
    Where the TVM compiler is not installed (a GPU machine measuring bundles), the
    versions that need it are null and `tvm` is the installed distribution's, if any."""
    libraries = {"torch": _distribution_version("torch"),
                 "xgboost": _distribution_version("xgboost-cpu")
                 or _distribution_version("xgboost"),
                 "numpy": _distribution_version("numpy"), "python": sys.version.split()[0]}
    try:
        from cost_model import FEATURE_VERSION
        from search_space import SPACE_VERSION

        from autosched import library_versions

        product = library_versions(SPACE_VERSION)
    except ImportError:
        from autosched import __version__

        return {"autosched": __version__, "tvm": _distribution_version("apache-tvm"),
                "tvm_ffi": _distribution_version("apache-tvm-ffi"), "space": None,
                "features": None, "compiler": False, **libraries}
    return {**product, "features": FEATURE_VERSION, **libraries}


def machine() -> dict:
    """This machine as the product fingerprints it (CPU model from /proc/cpuinfo, the
    cores this process may use, LLVM's name for the CPU: null without the TVM compiler),
    and its load when the run began (on a shared machine, a high load makes timings
    slower and noisier)."""
    from autosched import cpu_fingerprint, resolve_target

    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # not on every platform
        load = None
    try:
        fingerprint = resolve_target("llvm").fingerprint
    except ImportError:
        fingerprint = cpu_fingerprint(None)
    return {**fingerprint, "load_average_1m": load}


def stamp(seed, argv: list[str] | None = None, **settings) -> dict:
    """The provenance of one run. `seed`: the run's seed (an int, a list or dict of
    them, or None for a run that draws no random numbers); `settings`: anything else a
    reader needs that the command line does not show (JSON-serialisable)."""
    out = {"command": command_line(argv), "cwd": _cwd_text(), **git_state(),
           "versions": versions(), "seed": seed, "machine": machine(),
           "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if settings:
        out["settings"] = settings
    return out


def _cwd_text() -> str:
    """The working directory relative to the repository root (relative paths in the
    command are relative to it)."""
    cwd = Path.cwd().resolve()
    try:
        return str(cwd.relative_to(ROOT))
    except ValueError:
        return str(cwd)


def write_json(path, payload: dict, provenance: dict, **dump_options) -> None:
    """Write `payload` to `path` with `provenance` as its first, top-level key."""
    if "provenance" in payload:
        raise ValueError("the payload already has a 'provenance' key")
    dump_options.setdefault("indent", 1)
    with open(path, "w") as f:
        json.dump({"provenance": provenance, **payload}, f, **dump_options)
        f.write("\n")


def sidecar_path(path) -> str:
    """`plot.png` -> `plot.png.provenance.json`."""
    return str(path) + SIDECAR_SUFFIX


def write_sidecar(path, provenance: dict) -> str:
    """The provenance of a non-JSON result (a PNG, a text table) beside it; returns the
    sidecar's path."""
    side = sidecar_path(path)
    with open(side, "w") as f:
        json.dump({"file": os.path.basename(str(path)), "provenance": provenance}, f, indent=1)
        f.write("\n")
    return side


def header(provenance: dict) -> str:
    """One line that starts a text result printed to stdout (and so redirected into a
    file): `# provenance: {...}`."""
    return HEADER_PREFIX + json.dumps(provenance, sort_keys=True)


def read_header(line: str) -> dict:
    """The provenance in a line written by `header`."""
    if not line.startswith(HEADER_PREFIX):
        raise ValueError(f"not a provenance header: {line[:60]!r}")
    return json.loads(line[len(HEADER_PREFIX):])
