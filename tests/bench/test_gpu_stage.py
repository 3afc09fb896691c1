"""Staging the whole tuner onto the GPU machine in two transfers (bench/gpu/stage.py): the
size verdicts, the compiler split across the transfers and put back together byte for
byte, the one line said when transfer 1 was not run, and the environment of transfer 2,
all on small fake trees."""
from __future__ import annotations

import json
import random
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "gpu"))

import stage  # noqa: E402
import stage_pieces  # noqa: E402

MiB = 2 ** 20


def test_a_transfer_fits_only_with_the_tree_counted():
    fits, line = stage.verdict(stage.Transfer("transfer 1", 7 * MiB,
                                              {"bench/gpu/stage1": 50 * MiB}))
    assert fits
    assert line == ("transfer 1: 57.0 MiB of 60 MiB (fits): tree 7.0 MiB, "
                    "bench/gpu/stage1 50.0 MiB")
    fits, line = stage.verdict(stage.Transfer("transfer 2", 11 * MiB,
                                              {"bench/gpu/stage2": 50 * MiB}))
    assert not fits and line.startswith("transfer 2: 61.0 MiB of 60 MiB (DOES NOT FIT)")
    assert stage.verdict(stage.Transfer("t", 10, {"a": 10}), limit=20)[0]
    assert not stage.verdict(stage.Transfer("t", 10, {"a": 11}), limit=20)[0]


def test_transfer_one_takes_the_leading_pieces_that_fit_beside_the_tree():
    sizes = [20 * MiB, 20 * MiB, 16 * MiB]
    assert stage_pieces.split_pieces(sizes, tree=4 * MiB) == 2       # 60 MiB + the manifest's reserve
    assert stage_pieces.split_pieces(sizes, tree=4 * MiB, reserve=0) == 3
    assert stage_pieces.split_pieces(sizes, tree=25 * MiB) == 1
    assert stage_pieces.split_pieces(sizes, tree=45 * MiB) == 0


def test_the_tree_counts_tracked_and_untracked_files_but_not_ignored_ones(tmp_path):
    _git_repo(tmp_path, "/carry/\n")                          # 8 bytes, untracked
    (tmp_path / "tracked.py").write_bytes(b"x" * 100)
    subprocess.run(["git", "add", "tracked.py"], cwd=tmp_path, check=True)
    (tmp_path / "new.py").write_bytes(b"y" * 50)
    (tmp_path / "carry").mkdir()
    (tmp_path / "carry" / "big.bin").write_bytes(b"z" * 1000)
    assert stage.tree_bytes(tmp_path) == 100 + 50 + 8


def _git_repo(path: Path, ignore: str) -> None:
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / ".gitignore").write_text(ignore)


def test_pack_splits_the_compiler_by_the_limit_and_refuses_what_cannot_fit(tmp_path):
    root = tmp_path / "repo"
    _git_repo(root, "".join(f"/{d}/\n" for d in (stage.STAGE1, stage.STAGE2, stage.SITE)))
    (root / "code.py").write_bytes(b"c" * 20_000)
    tvm = _fake_tvm(tmp_path)
    (tvm / "lib" / stage.COMPILER).write_bytes(random.Random(3).randbytes(120_000))
    wheels = root / stage.STAGE2 / "wheels"         # already downloaded: no pip, offline
    for w in stage.WHEELS:
        dist, version = w.requirement.split("==")
        _fake_wheel(wheels, f"{dist.replace('-', '_')}-{version}-cp312.whl", w.module)
    (wheels / "old_dep-1.0-cp312.whl").write_bytes(b"stale")
    lines = stage.pack(root, tvm, limit=100_000, piece_bytes=30_000)
    # random bytes do not compress: 4 pieces of ~30 kB, 2 beside the 20 kB tree
    s1 = json.loads((root / stage.STAGE1 / stage.MANIFEST).read_text())["compiler"]
    assert [p["length"] for p in s1["pieces"]] == [30_000, 30_000, 30_000, 30_000]
    assert lines[2].startswith("compiler: 4 pieces, 2 in transfer 1, 2 in transfer 2")
    assert len(list((root / stage.STAGE1).glob(f"{stage.COMPILER}.*.xz"))) == 2
    assert lines[0].startswith("transfer 1 (compiler): ") and "(fits)" in lines[0]
    assert not (wheels / "old_dep-1.0-cp312.whl").exists()
    with pytest.raises(stage.StageError, match="transfer 2 \\(tuner\\).*DOES NOT FIT"):
        stage.pack(root, tvm, limit=80_000, piece_bytes=30_000)
    # the pieces were moved, not copied: each lies in one of the two folders
    sides = [{p.name for p in (root / d).glob(f"{stage.COMPILER}.*.xz")}
             for d in (stage.STAGE1, stage.STAGE2)]
    assert len(sides[0]) == 1 and len(sides[1]) == 3 and not sides[0] & sides[1]


def _fake_compiler(size: int = 200_000) -> bytes:
    rng = random.Random(7)
    words = [bytes(rng.randrange(256) for _ in range(8)) for _ in range(64)]
    return b"".join(rng.choice(words) for _ in range(size // 8))


def _fake_tvm(tmp_path: Path) -> Path:
    tvm = tmp_path / "src" / "tvm"
    for rel, text in {"__init__.py": "VERSION = 1\n", "lib/libtvm_runtime.so": "rt",
                      f"lib/{stage.COMPILER}": "big", "3rdparty/cutlass/x.h": "h",
                      "web/app.js": "js", "relax/__pycache__/a.pyc": "pyc",
                      "relax/webgpu.py": "kept\n", "include/tvm/runtime/c.h": "h"}.items():
        (tvm / rel).parent.mkdir(parents=True, exist_ok=True)
        (tvm / rel).write_text(text)
    info = tmp_path / "src" / "apache_tvm-0.27.0.post1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Name: apache-tvm\nVersion: 0.27.0.post1\n")
    return tvm


def _fake_wheel(folder: Path, name: str, module: str) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(folder / name, "w") as whl:
        whl.writestr(f"{module}/__init__.py", f"NAME = {module!r}\n")
    return {"file": name, "module": module, "pinned": module == "tvm_ffi"}


def _stage_fake_tree(tmp_path: Path, compiler: bytes, first: int) -> Path:
    """A fake repository root packed as `stage.pack` does, with 4 compiler pieces of
    which the first `first` travel in transfer 1."""
    root = tmp_path / "root"
    s1, s2 = root / stage.STAGE1, root / stage.STAGE2
    src = tmp_path / "src" / stage.COMPILER
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_bytes(compiler)
    section = stage_pieces.compress_pieces(src, s1, piece_bytes=len(compiler) // 4 + 1)
    assert len(section["pieces"]) == 4
    stage_pieces.place_pieces(section, s1, s2, first)
    tar = stage.pack_tvm(_fake_tvm(tmp_path), s2)
    wheels = [_fake_wheel(s2 / "wheels", "apache_tvm_ffi-0.1.14.post1-cp312.whl", "tvm_ffi"),
              _fake_wheel(s2 / "wheels", "ml_dtypes-0.7.0-cp312.whl", "ml_dtypes"),
              _fake_wheel(s2 / "wheels", "lacking-1.0-abi3.whl", "lacking")]
    (s2 / stage.MANIFEST).write_text(json.dumps(
        {"compiler": section, "tvm": tar.name, "wheels": wheels,
         "device_has": stage.DEVICE_HAS._asdict()}))
    return root


def _device_site(tmp_path: Path, modules=("numpy", "scipy", "typing_extensions",
                                          "ml_dtypes")) -> list[str]:
    """A stand-in for the device's own site-packages holding `modules`."""
    site = tmp_path / "device-site"
    for name in modules:
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text("")
    return [str(site)]


def test_the_tvm_package_leaves_out_the_compiler_cutlass_web_and_bytecode(tmp_path):
    tar = stage.pack_tvm(_fake_tvm(tmp_path), tmp_path)
    with tarfile.open(tar) as t:
        names = set(t.getnames())
    assert {"tvm/__init__.py", "tvm/lib/libtvm_runtime.so", "tvm/relax/webgpu.py",
            "tvm/include/tvm/runtime/c.h",
            "apache_tvm-0.27.0.post1.dist-info/METADATA"} <= names
    assert not [n for n in names if "3rdparty" in n or n.startswith("tvm/web/")
                or "__pycache__" in n or n.endswith(stage.COMPILER)]


def test_the_compiler_split_over_two_transfers_comes_back_byte_for_byte(tmp_path):
    compiler = _fake_compiler()
    root = _stage_fake_tree(tmp_path, compiler, first=2)
    assert sorted(p.name for p in (root / stage.STAGE1).glob("*.xz")) == [
        f"{stage.COMPILER}.000.xz", f"{stage.COMPILER}.001.xz"]
    assert len(list((root / stage.STAGE2).glob(f"{stage.COMPILER}.*.xz"))) == 2
    assert stage.unpack_compiler(root) == [f"{stage.COMPILER}.000.xz",
                                           f"{stage.COMPILER}.001.xz"]
    target = stage.compiler_path(root)
    assert not target.exists() and target.with_name(stage.COMPILER + ".part").is_file()
    env = stage.staged_env(root, base_env={"PYTHONPATH": "/mine", "HOME": "/h"},
                           cudart_dirs=["/cuda/lib64"], device_path=_device_site(tmp_path))
    assert target.read_bytes() == compiler
    assert not target.with_name(stage.COMPILER + ".part").exists()
    site = root / stage.SITE
    assert env["PYTHONPATH"] == f"{root}:{site}:/mine"
    assert env["LD_LIBRARY_PATH"] == "/cuda/lib64" and env["HOME"] == "/h"
    assert (site / "tvm" / "__init__.py").read_text() == "VERSION = 1\n"
    assert (site / "apache_tvm-0.27.0.post1.dist-info" / "METADATA").is_file()
    assert not (site / "tvm" / "3rdparty").exists()
    # pinned tvm_ffi always, `lacking` because the device lacks it, ml_dtypes not: it has one
    assert (site / "tvm_ffi").is_dir() and (site / "lacking").is_dir()
    assert not (site / "ml_dtypes").exists()
    # a second call finds everything in place and changes nothing
    again = stage.staged_env(root, base_env={}, cudart_dirs=[],
                             device_path=_device_site(tmp_path / "2"))
    assert again["PYTHONPATH"] == f"{root}:{site}" and again["LD_LIBRARY_PATH"] == ""


def test_a_compiler_that_fits_transfer_one_is_whole_after_it(tmp_path):
    compiler = _fake_compiler(60_000)
    root = _stage_fake_tree(tmp_path, compiler, first=4)
    assert len(stage.unpack_compiler(root)) == 4
    assert stage.compiler_path(root).read_bytes() == compiler
    assert stage.unpack_compiler(root) == []                   # already there


def test_run_executes_the_command_under_the_staged_environment(tmp_path):
    root = _stage_fake_tree(tmp_path, _fake_compiler(40_000), first=4)
    stage.unpack_compiler(root)
    code = ("import os, tvm_ffi, lacking; print(os.environ['PYTHONPATH']); "
            "print(tvm_ffi.NAME); raise SystemExit(3)")
    run = subprocess.run([sys.executable, str(Path(stage.__file__)), "--root", str(root),
                          "run", "--", sys.executable, "-c", code],
                         capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 3, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith(f"{root}:{root / stage.SITE}") and lines[1] == "tvm_ffi"
    empty = subprocess.run([sys.executable, str(Path(stage.__file__)), "--root", str(root),
                            "run"], capture_output=True, text=True)
    assert empty.returncode == 2 and "run needs a command" in empty.stderr


def test_transfer_two_without_transfer_one_says_what_to_run_first(tmp_path):
    root = _stage_fake_tree(tmp_path, _fake_compiler(40_000), first=2)
    with pytest.raises(stage.StageError) as err:
        stage.staged_env(root, base_env={}, cudart_dirs=[], device_path=_device_site(tmp_path))
    assert "\n" not in str(err.value)
    assert "python bench/gpu/stage.py unpack-compiler" in str(err.value)
    assert stage.STAGE1 in str(err.value)
    run = subprocess.run([sys.executable, str(Path(stage.__file__)), "--root", str(root), "env"],
                         capture_output=True, text=True)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and "unpack-compiler" in run.stderr


def test_a_device_without_what_device_has_names_is_refused_by_name(tmp_path):
    root = _stage_fake_tree(tmp_path, _fake_compiler(40_000), first=4)
    stage.unpack_compiler(root)
    with pytest.raises(stage.StageError, match="lacks scipy, typing_extensions"):
        stage.staged_env(root, base_env={}, cudart_dirs=[],
                         device_path=_device_site(tmp_path, ("numpy",)))


def test_what_is_carried_and_what_the_device_has_do_not_overlap():
    carried = {w.module for w in stage.WHEELS}
    assert not carried & set(stage.DEVICE_HAS.needed + stage.DEVICE_HAS.unused)
    assert stage.STAGE_DIRS.compiler == (stage.STAGE1,) and stage.STAGE_DIRS.tuner == (
        stage.STAGE2,)
    assert stage.SITE not in stage.STAGE_DIRS.compiler + stage.STAGE_DIRS.tuner
