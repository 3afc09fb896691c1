"""CUDA builds make device code for exactly the target's arch, the same way in the build
worker, the dry run and export, on a GPU machine (TVM's CUDA runtime registered; here
through the stand-in driver of support.cuda_standin) and on a build host without a
driver; an exported library loads with TVM's runtime libraries alone and no compiler.

Every process that builds CUDA is a real subprocess: a process that registered TVM's
CUDA runtime stays that way, which must not leak into other tests.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support.cuda_standin import SHARED_OVERFLOW_SCHEDULE, build_standin, gpu_machine_env

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
ARCH = "sm_90a"
TARGET = json.dumps({"kind": "cuda", "arch": ARCH})
# every example op file with workloads, at shapes that keep nvcc quick
SHAPES = {
    "matmul.py": ["M=64", "N=32", "K=48"],
    "conv2d.py": ["N=1", "C=8", "H=10", "W=12", "F=8"],
    "softmax.py": ["M=8", "N=200"],
    "dense_gelu.py": ["M=16", "N=64", "K=32"],
    "batch_matmul.py": ["B=2", "M=16", "N=32", "K=16"],
}
WORKLOADS = {"matmul.py": ["matmul"], "conv2d.py": ["conv2d", "depthwise_conv2d"],
             "softmax.py": ["softmax", "layer_norm"], "dense_gelu.py": ["dense_bias_gelu"],
             "batch_matmul.py": ["batch_matmul"]}

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None or shutil.which("cc") is None,
                                reason="needs nvcc and cc")

# In the GPU machine's environment: build one valid candidate of every example workload
# through the build worker, dry-run two candidates of each, and record the built ones
# in a sqlite database for export.
BUILD = textwrap.dedent("""
    import json, random, sys
    from autosched.db import open_database
    from autosched.db.record import make_record
    from autosched.dry_run import dry_run_task
    from autosched.measure.cuda import fatbin
    from autosched.measure.builder import LocalBuilder
    from autosched.results import MeasureResult
    from autosched.measure.settings import MeasureInput, MeasureSettings
    from autosched.target import resolve_target
    from autosched.versions import current_versions
    from autosched.workload import load_tasks
    from search_space import SPACE_VERSION, InvalidCandidate, generate_space

    target_text, shapes, folder, db_url = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], \\
        sys.argv[4]
    target = resolve_target(target_text)
    tasks = [t for f, args in shapes.items() for t in load_tasks(f, arg_items=args)]
    inputs = []
    for task in tasks:
        space, rng = generate_space(task, target), random.Random(1)
        while True:
            try:
                cand, mod = space.sample(rng)
            except InvalidCandidate:
                continue
            if cand.sketch != "default" and space.check(mod) is None:
                break
        inputs.append(MeasureInput(task, target, cand, mod))
    builder = LocalBuilder(MeasureSettings(build_workers=2), folder)
    arts = builder.build(inputs)
    out = {"built": {}, "dry_run": {}}
    for inp, art in zip(inputs, arts):
        entries = fatbin.library_entries(art.path) if art.ok else []
        out["built"][inp.task.workload] = [art.error_kind, [e.arch for e in entries]]
    db = open_database(db_url)
    versions = current_versions(SPACE_VERSION)
    result = MeasureResult((1e-4, 1e-4, 1e-4), None, "", 1.0, 0.1)
    db.add_records([make_record(i.task, target, i.candidate, result, versions)
                    for i, a in zip(inputs, arts) if a.ok])
    db.close()
    builder.close()
    for task in tasks:
        report = dry_run_task(task, target, 2, seed=3)
        out["dry_run"][task.workload] = [report.generated, report.compiled, report.compiler,
                                         report.first_errors]
    print("RESULT", json.dumps(out))
""")

# Only tvm_ffi and TVM's runtime libraries: importing the `tvm` package (the compiler)
# fails, as it would where only the runtime is installed.
LOAD = textwrap.dedent("""
    import importlib.abc, importlib.machinery, sys
    class NoTVM(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        # the package can be found (its lib/ holds the runtime .so files), not imported
        def find_spec(self, name, path=None, target=None):
            if name == "tvm" or name.startswith("tvm."):
                spec = importlib.machinery.PathFinder.find_spec(name, path)
                spec.loader = self
                return spec
        def exec_module(self, module):
            raise ImportError("the TVM compiler is not installed here")
    sys.meta_path.insert(0, NoTVM())
    try:
        import tvm
        sys.exit("tvm imported")
    except ImportError:
        pass
    from autosched.torch import loader
    from autosched.torch.manifest import read_manifest
    found = []
    for directory in sys.argv[1:]:
        manifest = read_manifest(directory)
        module = loader.load_kernels(manifest)
        found += [k.symbol for k in manifest.kernels
                  if module.implements_function(k.symbol, query_imports=True)]
    print("RESOLVED", " ".join(sorted(found)))
    print("TVM", sorted(m for m in sys.modules if m == "tvm" or m.startswith("tvm.")))
""")


def _run(args, env, timeout=300):
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def _env(base: dict | None = None) -> dict:
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


@pytest.fixture(scope="module")
def gpu_env(tmp_path_factory):
    """The environment of a GPU machine: TVM's CUDA runtime loads (stand-in driver)."""
    return gpu_machine_env(build_standin(str(tmp_path_factory.mktemp("driver"))), _env())


@pytest.fixture(scope="module")
def built(gpu_env, tmp_path_factory):
    """What the build script reports, and the database it filled."""
    work = tmp_path_factory.mktemp("build")
    db_url = f"sqlite:///{work / 'records.db'}"
    shapes = {str(EXAMPLES / f): args for f, args in SHAPES.items()}
    out = _run(["-c", BUILD, TARGET, json.dumps(shapes), str(work / "run"), db_url], gpu_env)
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):]), db_url


def _export(op_file: str, db_url: str, out_dir: Path, env: dict):
    args = ["-m", "autosched", "export", str(EXAMPLES / op_file), "--target", TARGET,
            "--db", db_url, "-o", str(out_dir)]
    for a in SHAPES[op_file]:
        args += ["--arg", a]
    return _run(args, env)


def _fatbins(path: Path) -> list[bytes]:
    """Each fatbin carved out of a library file: header (u32 magic, u16 version, u16
    header size, u64 payload size) and payload."""
    data, found = path.read_bytes(), []
    at = data.find(b"\x50\xed\x55\xba")
    while at >= 0:
        _, _, header, size = struct.unpack_from("<IHHQ", data, at)
        found.append(data[at:at + header + size])
        at = data.find(b"\x50\xed\x55\xba", at + header + size)
    return found


def _image_archs(blob: bytes) -> list[tuple[int, int, bool]]:
    """(kind, SM number, arch-specific flag) of each image of a carved fatbin."""
    header, size = struct.unpack_from("<HQ", blob, 6)[0], len(blob)
    out, pos = [], header
    while pos < size:
        kind, _, entry_header, payload = struct.unpack_from("<HHIQ", blob, pos)
        sm, flags = struct.unpack_from("<I", blob, pos + 28)[0], \
            struct.unpack_from("<I", blob, pos + 40)[0]
        out.append((kind, sm, bool(flags & (1 << 20))))
        pos += entry_header + payload
    return out


@pytest.mark.slow
def test_build_worker_and_dry_run_make_device_code_for_the_arch(built):
    report, _ = built
    assert report["built"] == {w: [None, [ARCH]] for ws in WORKLOADS.values() for w in ws}
    assert {w: r[:3] for w, r in report["dry_run"].items()} == \
        {w: [2, 2, "nvcc"] for ws in WORKLOADS.values() for w in ws}, report["dry_run"]


@pytest.mark.slow
def test_exported_libraries_hold_a_fatbin_and_load_without_the_compiler(built, gpu_env,
                                                                        tmp_path):
    _, db_url = built
    dirs = []
    for op_file in SHAPES:
        out = _export(op_file, db_url, tmp_path / op_file, gpu_env)
        assert out.returncode == 0, out.stderr[-2000:]
        library = tmp_path / op_file / "kernels.so"
        fatbins = _fatbins(library)
        assert [_image_archs(f) for f in fatbins] == [[(2, 90, True)]], op_file  # SASS only
        assert b"__global__" not in library.read_bytes()  # no CUDA source inside
        manifest = json.loads((tmp_path / op_file / "manifest.json").read_text())
        assert manifest["cuda"] == {"arch": ARCH, "binary": "fatbin", "compiler": "nvcc"}
        _check_sources(tmp_path / op_file, manifest)
        dirs.append(str(tmp_path / op_file))
    loaded = _run(["-c", LOAD, *dirs], gpu_env)
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    assert loaded.stdout.splitlines() == [
        "RESOLVED " + " ".join(sorted(w for ws in WORKLOADS.values() for w in ws)), "TVM []"]


def _check_sources(directory: Path, manifest: dict) -> None:
    """Export kept the kernels as text: each kernel's TIR, the library's CUDA source and
    (with cuobjdump) SASS, and each kernel's part of those is its own functions."""
    from autosched.measure.cuda import sass
    from autosched.torch.kernel_text import kernel_text
    from autosched.torch.manifest import read_manifest

    assert manifest["source"] == ({"cuda": "source/kernels.cu", "sass": "source/kernels.sass"}
                                  if sass.available() else {"cuda": "source/kernels.cu"})
    assert "__global__" in (directory / "source" / "kernels.cu").read_text()
    read = read_manifest(directory)
    for entry in read.kernels:
        assert f"def {entry.symbol}(" in kernel_text(read, entry, "tir")
        cuda = kernel_text(read, entry, "cuda")
        names = re.findall(r"__global__ void __launch_bounds__\(\d+\) (\w+)\(", cuda)
        assert names and all(n.startswith(entry.symbol + "_kernel") for n in names), names
        if sass.available():
            functions = re.findall(r"Function : (\w+)", kernel_text(read, entry, "sass"))
            assert sorted(set(functions)) == sorted(set(names))


@pytest.mark.slow
def test_build_host_without_a_driver_exports_the_same_fatbin(built, gpu_env, tmp_path):
    _, db_url = built
    gpu = _export("matmul.py", db_url, tmp_path / "gpu", gpu_env)
    env = _env()
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")   # the placeholder driver goes here
    host = _export("matmul.py", db_url, tmp_path / "host", env)
    assert (gpu.returncode, host.returncode) == (0, 0), host.stderr[-2000:]
    assert (tmp_path / "cache" / "autosched").is_dir()
    ours = _fatbins(tmp_path / "host" / "kernels.so")
    assert len(ours) == 1 and ours == _fatbins(tmp_path / "gpu" / "kernels.so")


NO_COMPILER = textwrap.dedent("""
    import sys
    import tvm
    from tvm import te
    from autosched.errors import InfrastructureError
    from autosched.measure.cuda.compiler import build_cuda
    a = te.placeholder((64,), name="a")
    b = te.compute((64,), lambda i: a[i] * 2, name="b")
    try:
        build_cuda(te.create_prim_func([a, b]), {"kind": "cuda", "arch": sys.argv[1]},
                   compiler=sys.argv[2])
    except InfrastructureError as e:
        print("MACHINE", e)
""")


def test_missing_nvcc_is_the_machines_fault(tmp_path):
    env = _env()
    env["PATH"] = "/usr/bin:/bin"   # cc stays, nvcc goes
    if shutil.which("nvcc", path=env["PATH"]):
        pytest.skip("nvcc lives in /usr/bin here")
    out = _run(["-c", NO_COMPILER, ARCH, "nvcc"], env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout == ("MACHINE cannot compile CUDA kernels: nvcc is not on PATH; install "
                          "the CUDA toolkit (nvcc on PATH, or the cuda-bindings package for "
                          "NVRTC), then rerun\n")


def test_an_arch_the_toolkit_lacks_is_the_machines_fault(tmp_path):
    env = _env()
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    out = _run(["-c", NO_COMPILER.replace("te.create_prim_func([a, b])", "_sched()")
                .replace("try:", SCHEDULE + "try:", 1), "sm_12", "nvcc"], env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("MACHINE the CUDA toolchain cannot compile even a trivial "
                                 "kernel for sm_12: nvcc: nvcc fatal   : Unsupported gpu "
                                 "architecture 'compute_12'; use a target arch")
    assert out.stdout.count("\n") == 1


SCHEDULE = textwrap.dedent("""
    def _sched():
        sch = tvm.s_tir.Schedule(te.create_prim_func([a, b]))
        (i,) = sch.get_loops(sch.get_sblock("b"))
        outer, inner = sch.split(i, [None, 32])
        sch.bind(outer, "blockIdx.x")
        sch.bind(inner, "threadIdx.x")
        return sch.mod
""")


# Through the build worker: a candidate that nvcc rejects is that candidate's one-line
# build_error (the task's default candidate builds, so it is not the machine), a good
# one builds; with no nvcc at all the whole batch is the machine's fault.
BUILDER = textwrap.dedent("""
    import json, sys
    from autosched.errors import InfrastructureError
    from autosched.measure.builder import LocalBuilder
    from autosched.measure.settings import MeasureInput, MeasureSettings
    from autosched.target import resolve_target
    from autosched.workload import load_tasks
    from search_space import generate_space
    """) + SCHEDULE + SHARED_OVERFLOW_SCHEDULE + textwrap.dedent("""
    target = resolve_target(json.dumps({"kind": "cuda", "arch": "sm_90a",
                                        "max_shared_memory_per_block": 1 << 20}))
    task = load_tasks(sys.argv[1], arg_items=["M=64", "N=32", "K=48"])[0]
    space = generate_space(task, target)
    default = space.apply(space.default_candidate())
    inputs = [MeasureInput(task, target, None, m, default) for m in (sch.mod, _sched())]
    builder = LocalBuilder(MeasureSettings(build_workers=1), sys.argv[2])
    try:
        print("BUILT", json.dumps([[x.error_kind, x.error_msg] for x in builder.build(inputs)]))
    except InfrastructureError as e:
        print("MACHINE", e)
    builder.close()
""")


@pytest.mark.slow
def test_build_worker_tells_a_candidates_nvcc_error_from_the_machines(gpu_env, tmp_path):
    args = ["-c", BUILDER, str(EXAMPLES / "matmul.py"), str(tmp_path / "run")]
    out = _run(args, gpu_env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["BUILT " + json.dumps([
        ["build_error", "nvcc: ptxas error   : Entry function 'main_kernel' uses too much "
                        "shared data (0x40000 bytes, 0x38c00 max)"], [None, ""]])]
    no_nvcc = dict(gpu_env, PATH="/usr/bin:/bin")
    if shutil.which("nvcc", path=no_nvcc["PATH"]):
        pytest.skip("nvcc lives in /usr/bin here")
    out = _run(args, no_nvcc)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout == ("MACHINE cannot compile CUDA kernels: neither nvcc on PATH nor "
                          "NVRTC (the cuda-bindings package); install "
                          "the CUDA toolkit (nvcc on PATH, or the cuda-bindings package for "
                          "NVRTC), then rerun\n")
