"""The tensor-core sketch past 128 x 128: per-warp output staging (so block tiles of
128 x 256 and 256 x 128 are decisions, 256 x 256 with fp16 accumulators), fragments
double-buffered in registers, and vectorised write-back. Decisions drawn within the
registers and shared memory of the target; wide candidates computed on the CPU against
the reference (both fragment-buffer settings, odd sizes, epilogues); and their SASS for
sm_80 and sm_90a."""
from __future__ import annotations

import json
import random
import shutil
import textwrap
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from support.llvm_run import normal_inputs, run_llvm

ROOT = Path(__file__).resolve().parents[2]
MP = str(ROOT / "examples" / "mixed_precision.py")
MATMUL = str(ROOT / "examples" / "matmul.py")
H200_DYNAMIC = 232448


def _task(workload: str, *args: str, path: str = MP):
    from autosched.workload import load_tasks

    return next(t for t in load_tasks(path, arg_items=list(args)) if t.workload == workload)


def _target(arch: str = "sm_80", dynamic: int = H200_DYNAMIC):
    from autosched.target import resolve_target

    return resolve_target(json.dumps({"kind": "cuda", "arch": arch,
                                      "max_dynamic_shared_memory_per_block": dynamic}))


def _roles(task, block: str):
    from tvm import s_tir

    from search_space.cuda.gemm_form import gemm_roles
    from search_space.cuda.tensor_core_budget import output_run

    sch = s_tir.Schedule(task.mod)
    roles = gemm_roles(sch, sch.get_sblock(block))
    return roles, output_run(sch, sch.get_sblock(block), roles)


def _draws(task, block: str, target, n: int) -> list[dict]:
    from search_space.cuda.limits import GpuLimits
    from search_space.cuda.tensor_core_budget import decide_block
    from search_space.decisions import Decider

    roles, run = _roles(task, block)
    limits = GpuLimits.of(target)
    return [decide_block(Decider(rng=random.Random(seed)), block, roles, limits, run)
            for seed in range(n)]


def test_wide_block_tiles_are_drawn_within_registers_and_shared_memory():
    """400 draws of a 4096-cube GEMM's decisions at an H200's shared memory: 128 x 256 and
    256 x 128 among them, both fragment-buffer settings, every draw within the
    registers and shared memory a block may use; 256 x 256 with fp16 accumulators only."""
    from search_space.cuda.limits import GpuLimits
    from search_space.cuda.tensor_core_budget import (
        fragment_registers,
        pipeline_bytes,
        register_limit,
        staging_bytes,
    )

    target = _target()
    limits = GpuLimits.of(target)
    for task, acc_bytes, widths in (
            (_task("matmul_mp", "M=4096", "N=4096", "K=4096"), 4, {4, 2}),
            (_task("matmul", "M=4096", "N=4096", "K=4096", "dtype=float16", path=MATMUL), 2,
             {8, 4, 2})):
        draws = _draws(task, "C", target, 400)
        tiles = Counter((d["bm"], d["bn"]) for d in draws)
        for d in draws:
            warps = d["wm"] * d["wn"]
            assert warps <= 8 and max(d["bm"], d["bn"]) <= 256
            assert fragment_registers(d["fm"], d["fn"], acc_bytes, d["frag_buffers"]) <= \
                register_limit(limits, warps)
            assert pipeline_bytes(d["bm"], d["bn"], d["kc"], d["stages"], True) + \
                staging_bytes(d["wm"], d["wn"], acc_bytes) <= H200_DYNAMIC
            assert d["frag_buffers"] == 1 or d["kc"] >= 32   # two K steps to overlap
        assert tiles[(128, 256)] and tiles[(256, 128)]
        assert {d["frag_buffers"] for d in draws} == {1, 2}
        # 4096-wide rows: up to 16 bytes of staged accumulators a store
        assert {d["out_vector"] for d in draws} == widths
        # fp32 accumulators of a 256 x 256 tile need 256 registers a thread in 8 warps
        assert bool(tiles[(256, 256)]) == (acc_bytes == 2)
    # 16 warps of 64 x 64 would be 256 x 256 too: past 65536 registers a block
    assert register_limit(limits, 16) == 128 < fragment_registers(4, 4, 4, 1) == 216


def test_output_run_follows_the_epilogue_to_the_stored_rows():
    """The write-back's vector width: what the output rows (and the epilogue's inputs
    along them) allow, 16 bytes of staged accumulators at most."""
    from tvm import te

    from autosched.workload import WorkloadDef, make_task

    def transposed(M=32, N=48, K=32):
        a = te.placeholder((M, K), "float16", name="A")
        b = te.placeholder((K, N), "float16", name="B")
        k = te.reduce_axis((0, K), name="k")
        c = te.compute((M, N), lambda i, j: te.sum(
            a[i, k].astype("float32") * b[k, j].astype("float32"), axis=k), name="C")
        return a, b, te.compute((N, M), lambda j, i: c[i, j], name="T")

    cases = [(_task("matmul_mp", "M=40", "N=100", "K=32"), "C", 100, (4, 2)),
             (_task("matmul_mp", "M=40", "N=102", "K=32"), "C", 102, (2,)),
             (_task("dense_bias_gelu_mp", "M=32", "N=260", "K=64"), "dense", 260, (4, 2)),
             (_task("conv2d_nhwc_mp", "N=2", "H=7", "W=7", "C=8", "F=24"), "conv", 24, (4, 2)),
             (_task("matmul", "M=40", "N=96", "K=32", "dtype=float16", path=MATMUL), "C", 96,
              (8, 4, 2)),
             (make_task(WorkloadDef("transposed", transposed, {}), {}), "C", 1, (1,))]
    for task, block, run, widths in cases:
        assert _roles(task, block)[1] == run, task.workload
        assert {d["out_vector"] for d in _draws(task, block, _target(), 40)} == set(widths)


def _wide(wm, wn, fm, fn, frag_buffers, out_vector, kc=32, stages=3, vector=8):
    return {"warps_m": wm, "warps_n": wn, "frags_m": fm, "frags_n": fn, "k_chunk": kc,
            "stages": stages, "vector": vector, "raster": 1, "unroll": 0,
            "frag_buffers": frag_buffers, "out_vector": out_vector}


# (workload, args, op file, GEMM block, decisions): odd extents, so every wide tile is
# padded and its write-back predicated
CPU_CASES = [
    ("matmul_mp", ["M=260", "N=136", "K=48"], MP, "C", _wide(4, 2, 4, 4, 2, 4)),
    ("matmul_mp", ["M=136", "N=264", "K=40", "dtype=bfloat16"], MP, "C",
     _wide(2, 4, 4, 4, 1, 2, stages=2)),
    ("dense_bias_gelu_mp", ["M=264", "N=136", "K=64"], MP, "dense",
     _wide(4, 2, 4, 4, 2, 4, kc=64, stages=2)),
    ("batch_matmul_mp", ["B=2", "M=136", "N=260", "K=32"], MP, "C",
     _wide(2, 4, 4, 4, 2, 4, vector=4)),
    ("matmul", ["M=260", "N=264", "K=32", "dtype=float16"], MATMUL, "C",
     _wide(2, 4, 8, 4, 1, 8)),
]


@pytest.mark.parametrize("workload,args,path,block,decisions", CPU_CASES)
def test_wide_tiles_compute_the_reference_on_cpu(workload, args, path, block, decisions):
    """The schedule with threads serial and intrinsics as their descriptions (the
    software pipelines lowered too: multi-versioned buffers, prologues, epilogues), the
    write-back vectorised, built for llvm: bit-equal to the unscheduled computation
    (the same products, summed in the same order)."""
    from tvm import s_tir

    from search_space.cuda.limits import GpuLimits
    from search_space.cuda.tensor_core import CPU_CHECK, TensorCoreSketch
    from search_space.decisions import Decider

    task = _task(workload, *args, path=path)
    target = _target()
    inputs = normal_inputs(task)
    ref = run_llvm(task.mod, task, inputs)
    sch = s_tir.Schedule(task.mod)
    decide = Decider({f"{block}.{k}": v for k, v in decisions.items()})
    TensorCoreSketch(GpuLimits.of(target), target, CPU_CHECK).apply(sch, decide)
    d = decisions
    assert (d["warps_m"] * d["frags_m"] * 16, d["warps_n"] * d["frags_n"] * 16) in {
        (256, 128), (128, 256), (256, 256)}
    for got, want in zip(run_llvm(sch.mod, task, inputs), ref):
        assert np.abs(want.astype("f8")).max() > 0
        assert np.array_equal(got, want), np.abs(got.astype("f8") - want.astype("f8")).max()


COMPILE = textwrap.dedent("""
    import json, os, re, sys, tempfile
    sys.path.insert(0, sys.argv[1])
    from autosched.measure.cuda import sass
    from autosched.measure.cuda.compiler import build_cuda
    from test_tensor_core_wide import _target, _task, _wide
    from search_space import generate_space
    from search_space.candidate import Candidate

    CASES = [("matmul_mp", ["M=4096", "N=4096", "K=1024"], "C", _wide(2, 4, 4, 4, 2, 4)),
             ("dense_bias_gelu_mp", ["M=4000", "N=3000", "K=1024"], "dense",
              _wide(4, 2, 4, 4, 1, 4, kc=64, stages=4))]
    out = []
    for arch in ("sm_80", "sm_90a"):
        target = _target(arch)
        for workload, args, block, d in CASES:
            space = generate_space(_task(workload, *args), target)
            mod = space.apply(Candidate.make("tensor_core", {
                f"{block}.{k}": v for k, v in d.items()}))
            lib = os.path.join(tempfile.mkdtemp(), "k.so")
            build_cuda(mod, target.config).executable.export_library(lib)
            counts = sass.mnemonic_counts(lib)
            out.append({"arch": arch, "workload": workload, "check": space.check(mod),
                        "counts": dict(counts)})
    print("RESULT", json.dumps(out))
""")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_wide_tiles_compile_with_hmma_vector_stores_and_no_spills():
    """A 128 x 256 fp32-output matmul and a 256 x 128 dense + bias + GELU with fp16 output
    at odd sizes, for sm_80 and sm_90a: HMMA, ldmatrix, cp.async, no local memory, and
    the write-back's stores all vectors -- per thread 16 fragments x 2 stores of 4
    elements, 16 bytes of fp32 or 8 of fp16 (the fragment loops unrolled)."""
    from support.sass_tools import run_compile_script, skip_without_cuobjdump

    skip_without_cuobjdump()
    rows = run_compile_script(COMPILE, Path(__file__).parent)
    assert [(r["arch"], r["workload"]) for r in rows] == [
        (a, w) for a in ("sm_80", "sm_90a") for w in ("matmul_mp", "dense_bias_gelu_mp")]
    for r in rows:
        c = r["counts"]
        assert r["check"] is None
        assert c.get("HMMA.16816.F32", 0) > 0 and c.get("LDSM.16.M88.4", 0) > 0, r
        assert c.get("LDGSTS.E.BYPASS.128", 0) > 0, r
        assert not [k for k in c if k.startswith(("STL", "LDL"))], r
        stores = {k: n for k, n in c.items() if k.startswith("STG")}
        wide = "STG.E.128" if r["workload"] == "matmul_mp" else "STG.E.64"
        assert stores == {wide: 32}, r
