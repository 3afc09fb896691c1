"""The whole tuner (TVM's compiler included) staged onto the air-gapped GPU machine in two
transfers, because no single call can carry it.

Every device call ships the repository tree plus the ignored folders named in its
`carry`, at most 64 MiB in all (this module keeps to `LIMIT_BYTES`, leaving room), and
what a call unpacked into an ignored folder is still there for a call made soon after.
TVM's compiler library alone is about 250 MiB, so:

    python bench/gpu/stage.py pack              # here: writes stage1/ and stage2/
    python bench/gpu/stage.py unpack-compiler   # there, call 1, carry STAGE_DIRS.compiler
    python bench/gpu/stage.py run -- python -m autosched.cli tune OP_FILE --target cuda ...
                                                # there, call 2, carry STAGE_DIRS.tuner

(`stage.py env` prints the environment as `export` lines instead.)

`stage1/` holds the compiler library compressed (xz with the x86 branch filter) in
independent pieces of `PIECE_BYTES`, as many as fit transfer 1 beside the tree; any
pieces that do not fit travel in `stage2/`, with the tvm Python package minus its
compiler library and minus what the tuner never loads (`TVM_DROP`), and the cp312 wheels
of what the device lacks (`WHEELS`; `DEVICE_HAS` names what it has). Everything unpacks
into `site/`, which is never carried (a carried path replaces the device's copy).
`unpack-compiler` and `env` run on the device with the standard library alone (their
code is in stage_site.py); the lead's device script imports `STAGE_DIRS` and
`staged_env` from here.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import lzma
import os
import shlex
import subprocess
import sys
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from stage_site import (COMPILER, MANIFEST, ROOT, SITE, STAGE1, STAGE2,  # noqa: E402,F401
                        STAGE_DIRS, MiB, StageError, compiler_path, staged_env,
                        unpack_compiler)

LIMIT_BYTES = 60 * MiB          # per transfer, the repository tree included (hard limit 64)
PIECE_BYTES = 32 * MiB          # compiler bytes per independently compressed piece
# what `import tvm` + `autosched tune` never load: headers of CUTLASS (BYOC only), the
# web runtime's JavaScript (bytecode caches are dropped too)
TVM_DROP = ("3rdparty", "web", f"lib/{COMPILER}")


class DeviceHas(NamedTuple):
    """What the GPU machine's own Python (/opt/torch/.venv, 3.12) already has: `needed`
    are imported by `autosched tune` and not carried; `unused` are there but the tuner
    does not need them; `tools` are on its PATH."""
    python: str
    needed: tuple[str, ...]
    unused: tuple[str, ...]
    tools: tuple[str, ...]


# typing_extensions comes with torch; tvm_ffi imports it
DEVICE_HAS = DeviceHas(python="3.12", needed=("numpy", "scipy", "typing_extensions"),
                       unused=("torch", "triton", "cuda.bindings"), tools=("nvcc",))


class Wheel(NamedTuple):
    """A cp312 wheel carried in transfer 2. `pinned`: always unpacked (it shadows any
    copy the device has); otherwise unpacked only where the device lacks `module`."""
    requirement: str
    module: str
    pinned: bool


# What `autosched tune` imports beyond the standard library (its process and its build,
# reference and run workers; local runner, llvm and cuda): numpy, scipy, typing_extensions,
# ml_dtypes, tvm, tvm_ffi, xgboost, and cuda.bindings when it is there. MetaSchedule,
# run beside it on the same tasks (metaschedule_side.py), also needs psutil and
# cloudpickle (its worker pools). tornado serves only `--runner rpc://` (TVM's RPC) and
# psycopg only a postgresql:// database, so they are not carried.
WHEELS = (Wheel("apache-tvm-ffi==0.1.14.post1", "tvm_ffi", True),   # 0.1.15 segfaults
          Wheel("xgboost-cpu==3.2.0", "xgboost", True),
          Wheel("ml_dtypes==0.7.0", "ml_dtypes", False),            # tvm imports it
          Wheel("psutil==7.2.2", "psutil", False),
          Wheel("cloudpickle==3.1.3", "cloudpickle", False))


# ---- size accounting -------------------------------------------------------------------

class Transfer(NamedTuple):
    """One device call: the repository tree it always ships and the folders it carries."""
    name: str
    tree_bytes: int
    carried: dict            # folder (relative to the root) -> bytes

    @property
    def total(self) -> int:
        return self.tree_bytes + sum(self.carried.values())


def verdict(transfer: Transfer, limit: int = LIMIT_BYTES) -> tuple[bool, str]:
    """Whether the transfer fits `limit`, and one line saying what it carries."""
    fits = transfer.total <= limit
    parts = [f"tree {transfer.tree_bytes / MiB:.1f} MiB"] + [
        f"{folder} {n / MiB:.1f} MiB" for folder, n in transfer.carried.items()]
    return fits, (f"{transfer.name}: {transfer.total / MiB:.1f} MiB of {limit / MiB:.0f} MiB "
                  f"({'fits' if fits else 'DOES NOT FIT'}): " + ", ".join(parts))


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) \
        if folder.is_dir() else 0


def tree_bytes(root: Path = ROOT) -> int:
    """Bytes of what every call ships: tracked files plus untracked files git does not
    ignore (ignored folders such as bench/gpu/carry/ count only when carried)."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=root, capture_output=True, check=True).stdout
    files = {root / name for name in out.decode().split("\0") if name}
    return sum(f.stat().st_size for f in files if f.is_file() and not f.is_symlink())


def split_pieces(sizes: list[int], tree: int, limit: int = LIMIT_BYTES,
                 reserve: int = 8 * 1024) -> int:
    """How many leading compiler pieces (compressed sizes, in order) transfer 1 carries:
    as many as fit beside the tree and `reserve` bytes for its manifest."""
    used, count = tree + reserve, 0
    for size in sizes:
        if used + size > limit:
            break
        used, count = used + size, count + 1
    return count


# ---- the compiler library in pieces ----------------------------------------------------

def _filters(piece_bytes: int) -> list[dict]:
    return [{"id": lzma.FILTER_X86},
            {"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME,
             "dict_size": max(piece_bytes, 4096)}]


def compress_pieces(src: Path, out: Path, piece_bytes: int = PIECE_BYTES) -> dict:
    """`src` as independent xz pieces `<name>.NNN.xz` in `out` (in parallel); returns the
    compiler section of the manifest: size, sha256 and each piece's offset and length."""
    data = src.read_bytes()
    out.mkdir(parents=True, exist_ok=True)
    offsets = list(range(0, len(data), piece_bytes)) or [0]

    def one(index: int) -> dict:
        start = offsets[index]
        chunk = data[start:start + piece_bytes]
        name = f"{src.name}.{index:03d}.xz"
        (out / name).write_bytes(lzma.compress(chunk, format=lzma.FORMAT_XZ,
                                               filters=_filters(piece_bytes)))
        return {"file": name, "offset": start, "length": len(chunk)}

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        pieces = list(pool.map(one, range(len(offsets))))
    return {"name": src.name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
            "source": source_stamp(src), "pieces": pieces}


def source_stamp(src: Path) -> list:
    st = src.stat()
    return [str(src), st.st_size, st.st_mtime_ns]


# ---- pack (here) -----------------------------------------------------------------------

def pack_tvm(tvm_dir: Path, out: Path) -> Path:
    """The tvm package minus `TVM_DROP`, with its release's METADATA, as `tvm.tar.xz`."""
    infos = sorted(tvm_dir.parent.glob("apache_tvm-*.dist-info"))
    archive = out / "tvm.tar.xz"

    def keep(info: tarfile.TarInfo):
        rel = info.name[len("tvm/"):] if info.name.startswith("tvm/") else ""
        drop = "__pycache__" in rel.split("/") or any(
            rel == d or rel.startswith(d + "/") for d in TVM_DROP)
        return None if drop else info

    with tarfile.open(archive, "w:xz", preset=6) as tar:
        tar.add(tvm_dir, arcname="tvm", filter=keep)
        if infos:
            tar.add(infos[-1] / "METADATA", arcname=f"{infos[-1].name}/METADATA")
    return archive


def fetch_wheels(out: Path, python: str = sys.executable) -> list[dict]:
    """The cp312 wheels of WHEELS in `out`, downloaded only when not there yet."""
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for wheel in WHEELS:
        dist, version = wheel.requirement.split("==")
        prefix = f"{dist.replace('-', '_')}-{version}-"
        found = sorted(out.glob(prefix + "*.whl"))
        if not found:
            run = subprocess.run([python, "-m", "pip", "download", "-qq", wheel.requirement,
                                  "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
                                  "--platform", "manylinux_2_28_x86_64", "-d", str(out)],
                                 capture_output=True, text=True)
            if run.returncode:
                last = (run.stderr.strip().splitlines() or ["no output"])[-1]
                raise StageError(f"pip download {wheel.requirement} failed: {last}")
            found = sorted(out.glob(prefix + "*.whl"))
        if not found:
            raise StageError(f"pip downloaded no wheel named {prefix}*.whl for {wheel.requirement}")
        rows.append({"file": found[0].name, "module": wheel.module, "pinned": wheel.pinned})
    return rows


def _head(root: Path) -> str | None:
    """The commit the stage is packed at (the device's copy of the tree has no .git)."""
    run = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                         text=True)
    return run.stdout.strip() or None


def pack(root: Path = ROOT, tvm_dir: Path | None = None, *, limit: int = LIMIT_BYTES,
         piece_bytes: int = PIECE_BYTES) -> list[str]:
    """Write stage1/ and stage2/ under `root`; the lines saying what each transfer carries.
    StageError when either does not fit `limit`."""
    if tvm_dir is None:
        spec = importlib.util.find_spec("tvm")
        if spec is None or not spec.submodule_search_locations:
            raise StageError("apache-tvm is not installed in this Python; activate .venv")
        tvm_dir = Path(list(spec.submodule_search_locations)[0])
    s1, s2 = root / STAGE1, root / STAGE2
    if not (tvm_dir / "lib" / COMPILER).is_file():
        raise StageError(f"{tvm_dir / 'lib' / COMPILER} is missing: this tvm has no compiler")
    for folder in (STAGE1, STAGE2, SITE):
        if subprocess.run(["git", "check-ignore", "-q", folder + "/"], cwd=root).returncode:
            raise StageError(f"{folder}/ is not ignored by git (it would travel in every "
                             f"call): add /{folder}/ to .gitignore")
    section = _compiler_pieces(tvm_dir / "lib" / COMPILER, s1, s2, piece_bytes)
    tree = tree_bytes(root)
    pieces = [p["file"] for p in section["pieces"]]
    sizes = [_piece_file(p, s1, s2).stat().st_size for p in pieces]
    first = split_pieces(sizes, tree, limit)
    if first == 0:
        raise StageError(f"transfer 1 cannot carry even one compiler piece beside the "
                         f"{tree / MiB:.1f} MiB tree")
    place_pieces(section, s1, s2, first)
    tvm_tar = pack_tvm(tvm_dir, s2)
    wheels = fetch_wheels(s2 / "wheels")
    for stale in (s2 / "wheels").glob("*.whl"):
        if stale.name not in {w["file"] for w in wheels}:
            stale.unlink()
    (s2 / MANIFEST).write_text(json.dumps(
        {"compiler": section, "tvm": tvm_tar.name, "wheels": wheels,
         "device_has": DEVICE_HAS._asdict(), "commit": _head(root)}, indent=1))
    lines, ok = [], True
    for name, folder in (("transfer 1 (compiler)", s1), ("transfer 2 (tuner)", s2)):
        fits, line = verdict(Transfer(name, tree, {str(folder.relative_to(root)):
                                                   folder_bytes(folder)}), limit)
        ok, lines = ok and fits, lines + [line]
    tvm_mib = tvm_tar.stat().st_size / MiB
    lines.append(f"compiler: {len(pieces)} pieces, {first} in transfer 1, {len(pieces) - first} "
                 f"in transfer 2; tvm package {tvm_mib:.1f} MiB; wheels "
                 + ", ".join(w["file"].split("-")[0] for w in wheels))
    if not ok:
        raise StageError("; ".join(lines))
    return lines


def place_pieces(section: dict, s1: Path, s2: Path, first: int) -> None:
    """The first `first` pieces into stage1 (with its manifest), the rest into stage2;
    pieces of an older pack are removed."""
    pieces = [p["file"] for p in section["pieces"]]
    s1.mkdir(parents=True, exist_ok=True)
    s2.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(pieces):
        dest, other = (s1, s2) if i < first else (s2, s1)
        _piece_file(name, s1, s2).rename(dest / name)
        (other / name).unlink(missing_ok=True)      # an older pack's copy on the other side
    for stale in list(s1.glob(f"{COMPILER}.*.xz")) + list(s2.glob(f"{COMPILER}.*.xz")):
        if stale.name not in pieces:
            stale.unlink()
    (s1 / MANIFEST).write_text(json.dumps({"compiler": section}, indent=1))


def _piece_file(name: str, s1: Path, s2: Path) -> Path:
    return s1 / name if (s1 / name).is_file() else s2 / name


def _compiler_pieces(src: Path, s1: Path, s2: Path, piece_bytes: int) -> dict:
    """The compressed pieces, made again only when the library changed since the last
    pack (its path, size and mtime are recorded in stage1's manifest)."""
    old = s1 / MANIFEST
    if old.is_file():
        section = json.loads(old.read_text())["compiler"]
        if section.get("source") == source_stamp(src) and all(
                p["length"] <= piece_bytes for p in section["pieces"]) and all(
                _piece_file(p["file"], s1, s2).is_file() for p in section["pieces"]):
            return section
    return compress_pieces(src, s1, piece_bytes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="stage.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("pack", help="here: write stage1/ and stage2/ and print their sizes")
    sub.add_parser("unpack-compiler", help="there, transfer 1: unpack the compiler pieces")
    sub.add_parser("env", help="there, transfer 2: unpack the rest; print `export` lines")
    run = sub.add_parser("run", help="there, transfer 2: unpack the rest, then run CMD "
                                     "under the staged environment (its exit code)")
    run.add_argument("cmd", nargs=argparse.REMAINDER, help="the command, after --")
    parser.add_argument("--root", type=Path, default=ROOT,
                        help="the repository root (default: this file's)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    try:
        if args.command == "pack":
            print("\n".join(pack(root)))
        elif args.command == "unpack-compiler":
            written = unpack_compiler(root)
            done = compiler_path(root).is_file()
            print(f"unpacked {len(written)} compiler pieces into {compiler_path(root).parent}"
                  + ("" if done else " (the rest come in transfer 2)"))
        elif args.command == "env":
            env = staged_env(root)
            for key in ("PYTHONPATH", "LD_LIBRARY_PATH"):
                print(f"export {key}={shlex.quote(env[key])}")
        else:
            cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
            if not cmd:
                raise StageError("run needs a command: stage.py run -- python -m autosched.cli ...")
            env = staged_env(root)
            sys.stdout.flush()
            return subprocess.run(cmd, env=env).returncode
    except StageError as err:
        print(f"stage.py: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
