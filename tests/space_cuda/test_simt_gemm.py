"""The SIMT GEMM sketch (search_space/cuda/simt_gemm.py): which tasks get it, the copy
plans of its tiles, its kernels' values (run by the CPU emulator, odd sizes included),
and its candidates compiled by nvcc for sm_80 and sm_90a with 128-bit global and shared
loads and no local-memory spills in their SASS."""
from __future__ import annotations

import random
import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest
from support.simt_cases import simt_reference, simt_target, simt_task

ROOT = Path(__file__).resolve().parents[2]
SKETCH = "simt_gemm"


def _schedule(task, decisions, target):
    """(decisions made, scheduled module) of the sketch on `task`: sampled when
    `decisions` is a seed, else replayed exactly."""
    from tvm import s_tir

    from search_space.cuda.limits import GpuLimits
    from search_space.cuda.simt_gemm import SimtGemmSketch
    from search_space.decisions import Decider

    if isinstance(decisions, dict):
        decide = Decider(fixed=decisions)
    else:
        decide = Decider(rng=random.Random(decisions))
    sch = s_tir.Schedule(task.mod)
    SimtGemmSketch(GpuLimits.of(target)).apply(sch, decide)
    return decide.made, sch.mod


def test_offered_for_float32_gemms_only():
    from tvm import s_tir

    from search_space import generate_space
    from search_space.cuda.simt_gemm import simt_gemm_blocks

    def blocks(task):
        return simt_gemm_blocks(s_tir.Schedule(task.mod))

    assert SKETCH in generate_space(simt_task("matmul", M=64, N=64, K=64), simt_target()).sketches
    assert blocks(simt_task("batch_matmul")) == ["C"]
    assert blocks(simt_task("dense_bias_relu")) == ["dense"]
    assert blocks(simt_task("block_transform")) == ["T", "Y"]
    assert blocks(simt_task("matmul", dtype="float16")) == []
    assert blocks(simt_task("softmax")) == []


def test_copy_plans_load_whole_vectors():
    from search_space.cuda.simt_gemm import copy_plan, shared_bytes

    assert copy_plan(128, 8, 256, 512) == (4, 1)    # A of 128x128x8: one float4 a thread
    assert copy_plan(8, 128, 256, 512) == (4, 1)    # B [k, n]
    assert copy_plan(128, 16, 256, 512) == (4, 2)   # two rows a thread
    assert copy_plan(32, 8, 256, 36) == (1, 1)      # too few float4 for 256 threads
    assert copy_plan(64, 8, 64, 6) == (2, 4)        # rows of 6: float2
    assert copy_plan(64, 8, 64, 45) == (1, 8)       # odd rows: scalars
    assert copy_plan(8, 8, 256, 8) is None
    assert shared_bytes(128, 128, 8, False) == 8320    # A's rows padded by 4 floats
    assert shared_bytes(128, 128, 32, True) == 33792   # B transposed (dense) too


def test_samples_fit_the_target_with_128x128_class_tiles():
    from search_space.cuda.limits import check_module
    from search_space.cuda.simt_gemm import copy_plan

    task = simt_task("matmul", M=1024, N=1024, K=1024)
    target = simt_target()
    tiles = set()
    for seed in range(10):
        d, mod = _schedule(task, seed, target)
        if seed < 3:
            assert check_module(mod, target) is None, d
        tiles.add((d["C.block_m"], d["C.block_n"]))
        threads = (d["C.block_m"] // d["C.thread_m"]) * (d["C.block_n"] // d["C.thread_n"])
        assert 32 <= threads <= 256, d
        assert d["C.block_k"] * (d["C.block_m"] + 4 + d["C.block_n"]) * 4 <= 49152, d
        (va, ra), (vb, rb) = (copy_plan(d["C.block_m"], d["C.block_k"], threads, 1024),
                              copy_plan(d["C.block_k"], d["C.block_n"], threads, 1024))
        assert va * ra + vb * rb <= 32, d   # elements staged in registers
        assert d["C.split_m"] in ((1, 2) if d["C.thread_m"] == 8 else (1,)), d
    assert len(tiles) > 2


CASES = [
    ("matmul", {"M": 37, "N": 29, "K": 45}, 0),        # odd everywhere: scalar loads
    ("matmul", {"M": 70, "N": 64, "K": 36}, 1),        # float4 loads, M padded
    ("matmul", {"M": 33, "N": 30, "K": 22}, 0),        # rows of even length: float2
    ("batch_matmul", {"B": 2, "M": 20, "N": 36, "K": 24}, 2),
    ("dense_bias_relu", {"M": 19, "N": 40, "K": 32}, 3),
    pytest.param("block_transform", {"B": 2}, 4, marks=pytest.mark.slow),
    # 8 x 8 thread tiles as two runs of 4 in each dimension (virtual threads)
    ("matmul", {"M": 70, "N": 72, "K": 20}, {
        "C.thread_m": 8, "C.thread_n": 8, "C.block_m": 64, "C.block_n": 64, "C.block_k": 16,
        "C.split_m": 2, "C.split_n": 2, "C.unroll_k": True}),
]


@pytest.mark.parametrize("name,args,seed", CASES)
def test_emulated_kernel_equals_numpy(cuda_emulator, name, args, seed):
    """A sampled candidate (or one with the given decisions) of each case."""
    from search_space.cuda.limits import check_module

    task = simt_task(name, **args)
    target = simt_target()
    made, mod = _schedule(task, seed, target)
    assert check_module(mod, target) is None
    seed = 5 if isinstance(seed, dict) else seed
    rng = np.random.default_rng(seed)
    inputs = {s.name: rng.standard_normal(s.shape).astype("float32") for s in task.inputs}
    (out,) = task.outputs
    got = cuda_emulator.emulate(mod, target, inputs, {out.name: (out.shape, out.dtype)})
    want = simt_reference(name, inputs)
    assert np.abs(want).max() > 0
    np.testing.assert_allclose(got[out.name], want, rtol=1e-4, atol=1e-4, err_msg=str(made))


COMPILE = textwrap.dedent("""
    import json, os, re, sys, tempfile
    sys.path.insert(0, sys.argv[1])
    from autosched.measure.cuda import sass
    from autosched.measure.cuda.compiler import build_cuda
    from support.simt_cases import simt_target, simt_task
    from test_simt_gemm import SKETCH
    from search_space import generate_space
    from search_space.candidate import Candidate
    import random

    BEST = {"C.thread_m": 8, "C.thread_n": 8, "C.block_m": 128, "C.block_n": 128,
            "C.block_k": 8, "C.split_m": 2, "C.split_n": 2, "C.unroll_k": True,
            "double_buffer": False}
    out = []
    for arch in ("sm_80", "sm_90a"):
        target = simt_target(arch)
        fixed = simt_task("matmul", M=512, N=512, K=512)
        space = generate_space(fixed, target)
        best = space.apply(Candidate.make(SKETCH, BEST))
        odd = simt_task("dense_bias_relu", M=100, N=200, K=64)
        odd_space = generate_space(odd, target)
        _, sampled = odd_space.sample(random.Random(7), sketch=SKETCH)
        for what, sp, mod in (("fixed", space, best), ("sampled", odd_space, sampled)):
            lib = os.path.join(tempfile.mkdtemp(), "k.so")
            build_cuda(mod, target.config).executable.export_library(lib)
            text = sass.dump_sass(lib)
            out.append({"arch": arch, "what": what, "check": sp.check(mod),
                        "counts": dict(sass.opcode_counts(lib)),
                        "wide": sorted(set(re.findall(r"\\b((?:LD|ST)[GS]\\.[A-Z0-9.]*)", text)))})
    print("RESULT", json.dumps(out))
""")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_candidates_compile_with_128_bit_loads_and_no_spills():
    """In a subprocess: a process that compiled CUDA keeps TVM's CUDA runtime
    registered. The opcode counts name an instruction by the part before its first
    dot (`LDG.E.128` counts as `LDG`), so the widths are read from the SASS text."""
    from support.sass_tools import run_compile_script, skip_without_cuobjdump

    skip_without_cuobjdump()
    rows = run_compile_script(COMPILE, Path(__file__).parent)
    assert [(r["arch"], r["what"]) for r in rows] == [
        ("sm_80", "fixed"), ("sm_80", "sampled"), ("sm_90a", "fixed"), ("sm_90a", "sampled")]
    for r in rows:
        assert r["check"] is None
        assert r["counts"].get("FFMA", 0) > 0, r
        assert r["counts"].get("STL", 0) == r["counts"].get("LDL", 0) == 0, r
        if r["what"] == "fixed":   # 128 x 128 x 8 block, 8 x 8 threads, float4 everywhere
            assert "LDS.128" in r["wide"], r
            assert any(w.startswith("LDG.E.128") for w in r["wide"]), r
            assert any(w.startswith("STG.E.128") for w in r["wide"]), r   # float4 write-back
            assert r["counts"]["FFMA"] == 2 * 8 * 64, r   # loop body and last tile: 8 k x 8 x 8
