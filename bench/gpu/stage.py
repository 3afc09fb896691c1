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

`stage1/` holds the compiler library compressed (stage_pieces.py: xz, x86 branch filter) in
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
import importlib.util
import json
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from stage_site import (COMPILER, MANIFEST, ROOT, SITE, STAGE1, STAGE2,  # noqa: E402,F401
                        STAGE_DIRS, MiB, StageError, compiler_path, staged_env,
                        unpack_compiler)
from stage_pieces import (LIMIT_BYTES, PIECE_BYTES, compiler_pieces,  # noqa: E402
                          piece_file, place_pieces, split_pieces)

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


STAGED = "AUTOSCHED_STAGED"   # set in the environment of a script re-run under the stage


def reexec_staged(script: str, label: str, argv=None) -> int:
    """Re-run `script` (a device script's own file) under the staged tuner (stage 1
    unpacked on this machine), with `STAGED` set so it runs its work instead of coming
    back here; 2 with one line prefixed by `label` when the stage is not in place."""
    import os

    try:
        env = dict(staged_env(ROOT), **{STAGED: "1"})
    except StageError as e:
        print(f"{label}: {e}", file=sys.stderr)
        return 2
    argv = sys.argv[1:] if argv is None else list(argv)
    os.execve(sys.executable, [sys.executable, script, *argv], env)
    return 1  # not reached


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
    section = compiler_pieces(tvm_dir / "lib" / COMPILER, s1, s2, piece_bytes)
    tree = tree_bytes(root)
    pieces = [p["file"] for p in section["pieces"]]
    sizes = [piece_file(p, s1, s2).stat().st_size for p in pieces]
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
