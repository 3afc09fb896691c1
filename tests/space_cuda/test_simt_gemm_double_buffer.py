"""The SIMT GEMM sketch's double-buffered K loop (search_space/cuda/simt_gemm.py with its
build pipeline, simt_gemm_pipeline.py): where it is offered, its kernels' values (run by
the CPU emulator from the source our pipeline makes, odd sizes included), and its
candidates compiled by nvcc for sm_80 and sm_90a: one barrier per K step, two copies of
each shared tile, 128-bit loads and stores, and no local-memory spills."""
from __future__ import annotations

import random
import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest

from support.simt_cases import simt_reference, simt_target, simt_task

SKETCH = "simt_gemm"
# the classic SGEMM block: 128 x 128 x 8, 8 x 8 thread tiles as two runs of 4 each way
BEST = {"C.thread_m": 8, "C.thread_n": 8, "C.block_m": 128, "C.block_n": 128,
        "C.block_k": 8, "C.split_m": 2, "C.split_n": 2, "C.unroll_k": True}


def _schedule(task, decisions, target):
    """(decisions made, scheduled module) of the sketch, double-buffered, through its
    program (which names the pipeline): `decisions` fixed, or a seed to sample with."""
    import tvm
    from tvm import s_tir

    from search_space.cuda.limits import GpuLimits
    from search_space.cuda.simt_gemm import SimtGemmSketch
    from search_space.decisions import Decider

    if isinstance(decisions, dict):
        decide = Decider(fixed={"double_buffer": True, **decisions})
    else:
        decide = Decider(fixed={"double_buffer": True}, rng=random.Random(decisions),
                         strict=False)
    sketch = SimtGemmSketch(GpuLimits.of(target))
    sch = s_tir.Schedule(tvm.IRModule({"main": sketch.program(task.func, decide)}))
    sketch.apply(sch, decide)
    return decide.made, sch.mod


def _source(mod, target) -> str:
    """The CUDA source of `mod` built by the pipeline its function names."""
    import tvm

    from autosched.measure.cuda.compiler import cuda_source
    from search_space.cuda.simt_gemm_pipeline import PIPELINE_NAME, register_pipeline

    register_pipeline()
    return cuda_source(tvm.compile(mod, target=target.tvm(), tir_pipeline=PIPELINE_NAME))


def loop_barriers(src: str) -> list[int]:
    """`__syncthreads` calls inside each loop at the kernel's top level (the K loop)."""
    lines, out = src.splitlines(), []
    for i, line in enumerate(lines):
        if line.startswith("  for ("):
            end = lines.index("  }", i)
            out.append(sum(ln.count("__syncthreads") for ln in lines[i:end]))
    return out


def test_double_buffer_is_a_decision_with_its_budgets():
    from search_space import generate_space
    from search_space.candidate import Candidate
    from search_space.cuda.simt_gemm import DB_REGISTER_BUDGET, shared_bytes
    from search_space.cuda.simt_gemm_pipeline import PIPELINE_ATTR, PIPELINE_NAME

    assert shared_bytes(128, 128, 8, False, copies=2) == 2 * 8320
    target = simt_target("sm_80")
    made, mod = _schedule(simt_task("matmul", M=1024, N=1024, K=1024), 3, target)
    assert made["double_buffer"] is True
    assert str(mod["main"].attrs[PIPELINE_ATTR]) == PIPELINE_NAME
    space = generate_space(simt_task("matmul", M=512, N=512, K=512), target)
    plain = space.apply(Candidate.make(SKETCH, {**BEST, "double_buffer": False}))
    assert plain["main"].attrs is None or PIPELINE_ATTR not in plain["main"].attrs
    double = space.apply(Candidate.make(SKETCH, {**BEST, "double_buffer": True}))
    assert space.check(plain) is None and space.check(double) is None
    # 8 x 8 accumulators leave 72 - 64 = 8 staged elements: a 128 x 128 x 16 block
    # stages 16 (a float4 of two rows of A and of B), so double buffered it offers BK 8
    assert DB_REGISTER_BUDGET == 72
    space.apply(Candidate.make(SKETCH, {**BEST, "C.block_k": 16, "double_buffer": False}))
    with pytest.raises(Exception, match="C.block_k=16 does not fit"):
        space.apply(Candidate.make(SKETCH, {**BEST, "C.block_k": 16, "double_buffer": True}))


def test_marks_become_double_buffer_writes_inside_loops_only():
    """A marked store inside a serial loop (the pipelined K loop) gets TVM's
    `double_buffer_write`; one outside (the pipeline's epilogue, where a read of the
    same copy may follow) loses its mark and keeps its barrier."""
    import tvm
    from tvm import tirx

    from search_space.cuda.simt_gemm_pipeline import MARK, mark_double_buffer_writes

    buf = tirx.decl_buffer((8,), "float32", name="S", scope="shared")
    i = tirx.Var("i", "int32")

    def marked(index):
        return tirx.AttrStmt(0, MARK, 1, tirx.BufferStore(buf, tirx.const(1.0, "float32"),
                                                          [index]))

    func = tirx.PrimFunc([], tirx.SeqStmt(
        [marked(0), tirx.For(i, 0, 4, tirx.ForKind.SERIAL, marked(i))]))
    body = mark_double_buffer_writes()(tvm.IRModule({"main": func}))["main"].body
    epilogue, loop = body.seq
    assert isinstance(epilogue, tirx.BufferStore)
    assert isinstance(loop.body, tirx.AttrStmt)
    assert str(loop.body.attr_key) == "double_buffer_write"
    assert isinstance(loop.body.body, tirx.BufferStore)


CASES = [   # K of four tiles or more of the sampled BK: the pipelined loop runs
    ("matmul", {"M": 37, "N": 29, "K": 45}, 0),        # odd everywhere: scalar loads
    ("matmul", {"M": 70, "N": 64, "K": 70}, 1),        # float2 loads of A, M padded
    ("matmul", {"M": 33, "N": 30, "K": 45}, 2),        # rows of even length: float2
    ("batch_matmul", {"B": 2, "M": 20, "N": 36, "K": 100}, 3),
    ("dense_bias_relu", {"M": 19, "N": 40, "K": 70}, 4),
    # the 128 x 128 x 8 block of 8 x 8 thread tiles (two runs of 4 each way), two
    # blocks, five K tiles
    ("matmul", {"M": 70, "N": 136, "K": 40}, BEST),
]


@pytest.mark.parametrize("name,args,seed", CASES)
def test_emulated_double_buffered_kernel_equals_numpy(cuda_emulator, name, args, seed):
    """A double-buffered candidate of each case, built by its own pipeline (one
    barrier per K step) and run by the emulator (a std::thread per CUDA thread)."""
    from search_space.cuda.limits import check_module, kernel_usage
    from search_space.cuda.lowering import lower_for_check

    task = simt_task(name, **args)
    target = simt_target()
    made, mod = _schedule(task, seed, target)
    assert check_module(mod, target) is None
    src = _source(mod, target)
    assert loop_barriers(src)[0] == 1 and max(loop_barriers(src)) == 1, src   # the K loop
    dims = [([u.extents.get(f"blockIdx.{a}", 1) for a in "xyz"],
             [u.extents.get(f"threadIdx.{a}", 1) for a in "xyz"])
            for u in kernel_usage(lower_for_check(mod, target.tvm()))]
    rng = np.random.default_rng(5 if isinstance(seed, dict) else seed)
    inputs = {s.name: rng.standard_normal(s.shape).astype("float32") for s in task.inputs}
    (out,) = task.outputs
    got = cuda_emulator.emulate_source(src, dims, inputs, {out.name: (out.shape, out.dtype)})
    want = simt_reference(name, inputs)
    assert np.abs(want).max() > 0
    np.testing.assert_allclose(got[out.name], want, rtol=1e-4, atol=1e-4, err_msg=str(made))


COMPILE = textwrap.dedent("""
    import json, os, random, re, sys, tempfile
    sys.path.insert(0, sys.argv[1])
    from autosched.measure.cuda import sass
    from autosched.measure.cuda.compiler import build_cuda, cuda_source
    from support.simt_cases import simt_target, simt_task
    from test_simt_gemm_double_buffer import BEST, SKETCH, _schedule, loop_barriers
    from search_space import generate_space
    from search_space.candidate import Candidate

    def build(mod, target):
        b = build_cuda(mod, target.config)
        lib = os.path.join(tempfile.mkdtemp(), "k.so")
        b.executable.export_library(lib)
        text, src = sass.dump_sass(lib), cuda_source(b.executable)
        return {"counts": dict(sass.opcode_counts(lib)),
                "wide": sorted(set(re.findall(r"\\b((?:LD|ST)[GS]\\.[A-Z0-9.]*)", text))),
                "loop_barriers": loop_barriers(src),
                "shared": re.findall(SHARED, src)}

    SHARED = r"__shared__ alignas\\(\\d+\\) (\\w+) (\\w+)\\[(\\d+)\\]"

    out = []
    fixed = simt_task("matmul", M=512, N=512, K=512)
    for arch in ("sm_80", "sm_90a"):
        target = simt_target(arch)
        space = generate_space(fixed, target)
        for double in (True, False):
            mod = space.apply(Candidate.make(SKETCH, {**BEST, "double_buffer": double}))
            out.append({"what": "fixed", "arch": arch, "double": double,
                        "check": space.check(mod), **build(mod, target)})
    tasks = [simt_task("matmul", M=1000, N=1500, K=700),
             simt_task("dense_bias_relu", M=100, N=200, K=64),
             simt_task("batch_matmul", B=4, M=128, N=256, K=128),
             simt_task("matmul", M=96, N=80, K=72)]
    for i in range(8):
        target = simt_target(("sm_80", "sm_90a")[i % 2])
        made, mod = _schedule(tasks[i % len(tasks)], 100 + i, target)
        try:
            row = build(mod, target)
        except Exception as e:
            row = {"error": str(e)[:300]}
        out.append({"what": "sampled", "arch": target.config["arch"], "made": made, **row})
    print("RESULT", json.dumps(out))
""")


@pytest.fixture(scope="module")
def compiled():
    """In a subprocess: a process that compiled CUDA keeps TVM's CUDA runtime
    registered."""
    from support.sass_tools import run_compile_script, skip_without_cuobjdump

    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc")
    skip_without_cuobjdump()
    return run_compile_script(COMPILE, Path(__file__).parent)


@pytest.mark.slow
def test_fixed_128x128x8_has_one_barrier_per_k_step(compiled):
    """The opcode counts name an instruction by the part before its first dot, so the
    widths are read from the SASS text; the barriers of the K loop from the source."""
    rows = [r for r in compiled if r["what"] == "fixed"]
    assert [(r["arch"], r["double"]) for r in rows] == [
        ("sm_80", True), ("sm_80", False), ("sm_90a", True), ("sm_90a", False)]
    for r in rows:
        c = r["counts"]
        assert r["check"] is None, r
        assert "LDS.128" in r["wide"], r
        assert any(w.startswith("LDG.E.128") for w in r["wide"]), r
        assert any(w.startswith("STG.E.128") for w in r["wide"]), r
        assert c.get("STL", 0) == c.get("LDL", 0) == 0, r
        if r["double"]:
            # two copies of A's [8, 128 + 4] and B's [8, 128] tiles
            assert r["shared"] == [["float", "A_reindex_shared_ptr", "2112"],
                                   ["float4", "B_reindex_shared_ptr", "512"]], r
            # 8 k x 8 x 8 multiply-adds in the loop body and in each of the pipeline's
            # two epilogue steps; one barrier in the loop, two in the epilogue
            assert c["FFMA"] == 3 * 8 * 64, r
            assert r["loop_barriers"] == [1], r
            assert c["BAR"] == 3, r
        else:   # one shared copy: a barrier either side of the math
            assert r["shared"] == [["float", "A_reindex_shared_ptr", "1056"],
                                   ["float4", "B_reindex_shared_ptr", "256"]], r
            assert c["FFMA"] == 2 * 8 * 64, r
            assert r["loop_barriers"] == [2], r
            assert c["BAR"] == 3, r


@pytest.mark.slow
def test_sampled_double_buffered_candidates_compile_without_spills(compiled):
    rows = [r for r in compiled if r["what"] == "sampled"]
    assert len(rows) == 8
    assert all(r["made"]["double_buffer"] is True for r in rows)
    built = [r for r in rows if "error" not in r]
    assert len(built) >= 0.9 * len(rows), rows
    for r in built:
        assert r["counts"].get("STL", 0) == r["counts"].get("LDL", 0) == 0, r
        assert r["counts"].get("FFMA", 0) > 0, r
        assert all(n <= 1 for n in r["loop_barriers"]), r
