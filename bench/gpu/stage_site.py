"""The device side of `stage.py`: what the two transfers unpack on the GPU machine, with
the standard library alone (no TVM, no numpy needed to run this file).

Transfer 1 (`unpack_compiler`) decompresses the compiler pieces it carries into
`site/tvm/lib/libtvm_compiler.so.part`; transfer 2 (`staged_env`) writes the remaining
pieces, checks the whole library's sha256, unpacks the tvm package and the wheels the
device lacks into `site/`, and returns the environment the tuner runs under. `site/` is
never named in a `carry` (a carried path replaces the device's copy, and one missing
here is removed there), so what transfer 1 unpacked is still there for transfer 2.
"""
from __future__ import annotations

import hashlib
import json
import lzma
import os
import sys
import tarfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MiB = 2 ** 20
COMPILER = "libtvm_compiler.so"
STAGE1, STAGE2, SITE = "bench/gpu/stage1", "bench/gpu/stage2", "bench/gpu/site"
MANIFEST = "stage.json"

class StageError(Exception):
    """A staging step that cannot go on; the message is one line naming what to do."""


class Transfers(NamedTuple):
    """The ignored folders to name in each device call's `carry`."""
    compiler: tuple[str, ...]
    tuner: tuple[str, ...]


STAGE_DIRS = Transfers(compiler=(STAGE1,), tuner=(STAGE2,))


def write_pieces(stage: Path, target: Path) -> list[str]:
    """Decompress the pieces found in `stage` into `target` + ".part" at their offsets;
    once every piece of the manifest is written (this call or an earlier one), check the
    whole file's sha256 and move it to `target`. Returns the pieces written now."""
    section = json.loads((stage / MANIFEST).read_text())["compiler"]
    part = target.with_name(target.name + ".part")
    progress = target.with_name(target.name + ".progress.json")   # pieces in .part
    stamp = target.with_name(target.name + ".sha256")             # what target holds
    if target.is_file() and stamp.is_file() and stamp.read_text() == section["sha256"]:
        return []
    target.parent.mkdir(parents=True, exist_ok=True)
    done = set()
    if part.is_file() and progress.is_file():
        earlier = json.loads(progress.read_text())
        done = set(earlier["done"]) if earlier["sha256"] == section["sha256"] else set()
    here = [p for p in section["pieces"] if p["file"] not in done and (stage / p["file"]).is_file()]
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | (0 if done else os.O_TRUNC))
    try:
        def one(piece: dict) -> None:
            data = lzma.decompress((stage / piece["file"]).read_bytes())
            if len(data) != piece["length"]:
                raise StageError(f"{piece['file']} is damaged: {len(data)} bytes, "
                                 f"expected {piece['length']}; run `stage.py pack` again")
            os.pwrite(fd, data, piece["offset"])

        with ThreadPoolExecutor(max(1, min(len(here), os.cpu_count() or 1))) as pool:
            list(pool.map(one, here))
    finally:
        os.close(fd)
    done |= {p["file"] for p in here}
    progress.write_text(json.dumps({"sha256": section["sha256"], "done": sorted(done)}))
    if done == {p["file"] for p in section["pieces"]}:
        digest = hashlib.sha256(part.read_bytes()).hexdigest()
        if digest != section["sha256"]:
            raise StageError(f"{target.name} unpacked with the wrong sha256; run "
                             "`stage.py pack` here and both transfers again")
        part.rename(target)
        stamp.write_text(digest)
        progress.unlink()
    return [p["file"] for p in here]


def compiler_path(root: Path) -> Path:
    return root / SITE / "tvm" / "lib" / COMPILER


def compiler_missing(root: Path) -> str:
    """The one line said when transfer 2 finds no unpacked compiler on this machine."""
    return (f"TVM's compiler library is not unpacked on this machine ({root / SITE}): run "
            f"`python bench/gpu/stage.py unpack-compiler` in a call carrying {STAGE1} first "
            "(within half a minute of this one)")


def unpack_compiler(root: Path = ROOT) -> list[str]:
    """Transfer 1: decompress stage1's pieces of the compiler library into the site."""
    stage = root / STAGE1
    if not (stage / MANIFEST).is_file():
        raise StageError(f"{stage / MANIFEST} is missing: run `python bench/gpu/stage.py "
                         f"pack` here and carry {STAGE1}")
    return write_pieces(stage, compiler_path(root))


# ---- transfer 2: the environment -------------------------------------------------------

def missing_modules(names, base_path: list[str] | None = None) -> list[str]:
    """Which top-level modules of `names` the interpreter does not find on `base_path`
    (default: its own sys.path)."""
    import importlib.machinery

    path = list(sys.path if base_path is None else base_path)
    return [n for n in names
            if importlib.machinery.PathFinder.find_spec(n.split(".")[0], path) is None]


def staged_env(root: Path = ROOT, *, base_env: dict | None = None,
               cudart_dirs: list[str] | None = None,
               device_path: list[str] | None = None) -> dict:
    """Transfer 2: finish the compiler library with stage2's pieces, unpack the tvm
    package and the wheels the device lacks into the site, and return the environment
    (`base_env`, default os.environ, plus PYTHONPATH and LD_LIBRARY_PATH) under which
    `python -m autosched.cli tune ...` runs with the device's own Python.
    `device_path`: where the device's own packages are looked up (default sys.path)."""
    stage, site = root / STAGE2, root / SITE
    if not (stage / MANIFEST).is_file():
        raise StageError(f"{stage / MANIFEST} is missing: run `python bench/gpu/stage.py "
                         f"pack` here and carry {STAGE2}")
    manifest = json.loads((stage / MANIFEST).read_text())
    target = compiler_path(root)
    if not (target.is_file() or target.with_name(COMPILER + ".part").is_file()):
        raise StageError(compiler_missing(root))
    write_pieces(stage, target)
    if target.with_name(COMPILER + ".part").is_file():
        raise StageError(compiler_missing(root) + "; some of its pieces were not unpacked")
    lacking = missing_modules(manifest["device_has"]["needed"], device_path)
    if lacking:
        raise StageError(f"this Python lacks {', '.join(lacking)}, which stage.DEVICE_HAS "
                         "says the device has; install them, or carry them in stage.WHEELS")
    stamps = site / ".stage"
    stamps.mkdir(parents=True, exist_ok=True)
    _unpack_once(stage / manifest["tvm"], stamps, lambda f: _extract_tar(f, site))
    for wheel in manifest["wheels"]:
        if wheel["pinned"] or missing_modules([wheel["module"]], device_path):
            _unpack_once(stage / "wheels" / wheel["file"], stamps,
                         lambda f: _extract_zip(f, site))
    env = dict(os.environ if base_env is None else base_env)
    cudart = _cudart() if cudart_dirs is None else cudart_dirs
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(site)] + (
        [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["LD_LIBRARY_PATH"] = os.pathsep.join(list(cudart) + (
        [env["LD_LIBRARY_PATH"]] if env.get("LD_LIBRARY_PATH") else []))
    return env


def _unpack_once(archive: Path, stamps: Path, unpack) -> None:
    stamp = stamps / (archive.name + ".done")
    signature = f"{archive.stat().st_size} {archive.stat().st_mtime_ns}"
    if stamp.is_file() and stamp.read_text() == signature:
        return
    unpack(archive)
    stamp.write_text(signature)


def _extract_tar(archive: Path, dest: Path) -> None:
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")


def _extract_zip(archive: Path, dest: Path) -> None:
    with zipfile.ZipFile(archive) as wheel:
        wheel.extractall(dest)


def _cudart() -> list[str]:
    sys.path.insert(0, str(HERE))
    import carry

    return carry.cudart_dirs()
