"""Candidates compile through `measure.cuda.compiler` (nvcc, a fatbin for the target's
arch), and every failure comes back as one line: the candidate's as CudaCompileError,
the toolchain's as InfrastructureError.

Each compile runs in a subprocess: a process that compiled CUDA this way has TVM's
CUDA runtime registered for good, which must not leak into other tests."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.cuda_standin import SHARED_OVERFLOW_SCHEDULE

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
ROOT = Path(__file__).resolve().parents[2]
PER_OP = 12   # bench/cuda_dry_run.py runs 64 per operator

SAMPLES = textwrap.dedent("""
    import json, os, sys, tempfile
    from autosched.measure.cuda import fatbin
    from autosched.measure.cuda.compiler import CudaCompileError, build_cuda, cuda_source
    from autosched.target import resolve_target
    from autosched.workload import load_tasks
    from search_space import generate_space
    sys.path.insert(0, sys.argv[4])
    from conftest import OP_FILES, EXAMPLES, _distinct_samples

    workload, count, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    target = resolve_target("cuda")
    task = next(t for f in OP_FILES for t in load_tasks(f"{EXAMPLES}/{f}")
                if t.workload == workload)
    space = generate_space(task, target)
    out = {"failures": [], "sources": [], "compilers": set()}
    library = os.path.join(tempfile.mkdtemp(), "k.so")
    for cand, mod in _distinct_samples(space, count, seed):
        reason = space.check(mod)
        if reason is None:
            try:
                build = build_cuda(mod, target.config)
                out["compilers"].add(build.compiler)
                out["sources"].append(cuda_source(build.executable))
                build.executable.export_library(library)
                if [e.arch for e in fatbin.library_entries(library)] != [target.config["arch"]]:
                    reason = "no fatbin for the arch"
            except CudaCompileError as e:
                reason = str(e)
        if reason is not None:
            out["failures"].append([cand.dumps(), reason])
    out["compilers"] = sorted(out["compilers"])
    print("RESULT", json.dumps(out))
""")

SHARED_OVERFLOW = SHARED_OVERFLOW_SCHEDULE + textwrap.dedent("""
    from autosched.measure.cuda.compiler import CudaCompileError, build_cuda
    for mod in (sch.mod, te.create_prim_func([a, b])):
        try:
            build_cuda(mod, {"kind": "cuda", "arch": "sm_90a",
                             "max_shared_memory_per_block": 1 << 20})
        except CudaCompileError as e:
            print("CANDIDATE", e)
""")


def _run(args, timeout=600):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def _samples(workload: str, count: int, seed: int = 0) -> dict:
    out = _run(["-c", SAMPLES, workload, str(count), str(seed), str(Path(__file__).parent)])
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


@needs_nvcc
def test_nvcc_errors_are_the_candidates_one_line_and_unscheduled_is_a_build_error():
    out = _run(["-c", SHARED_OVERFLOW])
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines() == [
        "CANDIDATE nvcc: ptxas error   : Entry function 'main_kernel' uses too much shared "
        "data (0x40000 bytes, 0x38c00 max)",
        "CANDIDATE build: the built module holds no CUDA kernel"]


def test_first_error_line_skips_the_source_dump():
    from autosched.measure.cuda.compiler import first_error_line

    text = ("extern \"C\" __global__ void k() {\n  int error_count = 0;\n}\n"
            "Compilation error:\n/tmp/x/tvm_kernels.cu(3): error: identifier \"foo\" is "
            "undefined\n1 error detected in the compilation of \"/tmp/x/tvm_kernels.cu\".\n")
    assert first_error_line(text) == 'tvm_kernels.cu(3): error: identifier "foo" is undefined'


def test_gencode_flags_ask_for_exactly_the_arch():
    from autosched.errors import InfrastructureError
    from autosched.measure.cuda.compiler import arch_of, gencode_flags

    assert gencode_flags("sm_90a") == ["-gencode", "arch=compute_90a,code=sm_90a"]
    assert gencode_flags("sm_80") == ["-gencode", "arch=compute_80,code=sm_80"]
    assert gencode_flags("sm_120f") == ["-gencode", "arch=compute_120f,code=sm_120f"]
    with pytest.raises(InfrastructureError, match="arch 'compute_90' is not of the form"):
        arch_of({"kind": "cuda", "arch": "compute_90"})


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("workload", ["matmul", "conv2d", "depthwise_conv2d", "softmax",
                                      "layer_norm", "dense_bias_gelu", "batch_matmul"])
def test_sampled_candidates_pass_check_and_compile(workload):
    """At least 90% of distinct sampled candidates fit the target and compile to a
    fatbin for its arch."""
    out = _samples(workload, PER_OP)
    assert out["compilers"] == ["nvcc"]
    assert len(out["failures"]) <= PER_OP // 10, out["failures"]
    if workload == "matmul":
        tiled = [s for s in out["sources"] if "__shared__" in s]
        assert tiled and all("__global__" in s and "__launch_bounds__" in s for s in tiled)
