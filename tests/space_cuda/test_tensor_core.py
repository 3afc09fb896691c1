"""The tensor-core sketch: which tasks and targets get it, the GEMM form it brings a
block into, the shared-memory limits it is held to, the index arithmetic of its
schedules (checked on the CPU against the reference), and its candidates compiled for
sm_80 and sm_90a with mma.sync (HMMA) and cp.async (LDGSTS) in their SASS."""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.llvm_run import normal_inputs, run_llvm

ROOT = Path(__file__).resolve().parents[2]
MP = str(ROOT / "examples" / "mixed_precision.py")
A100_DYNAMIC = 166912


def _task(workload: str, *args: str, path: str = MP):
    from autosched.workload import load_tasks

    return next(t for t in load_tasks(path, arg_items=list(args)) if t.workload == workload)


def _target(arch: str, **extra):
    from autosched.target import resolve_target

    return resolve_target(json.dumps({"kind": "cuda", "arch": arch, **extra}))


def _sketches(task, target) -> list[str]:
    from search_space import generate_space

    return list(generate_space(task, target).sketches)


def test_sketch_only_for_16_bit_gemms_on_sm80_and_newer():
    fp16 = _task("matmul_mp", "M=64", "N=64", "K=64")
    assert "tensor_core" in _sketches(fp16, _target("sm_80"))
    assert "tensor_core" in _sketches(fp16, _target("sm_90a"))
    assert "tensor_core" not in _sketches(fp16, _target("sm_75"))
    bf16 = _task("matmul_mp", "M=64", "N=64", "K=64", "dtype=bfloat16")
    assert "tensor_core" in _sketches(bf16, _target("sm_80"))
    # bf16 products accumulated in bf16: no mma.sync computes that
    bf16_acc = _task("matmul_mp", "M=64", "N=64", "K=64", "dtype=bfloat16", "acc=bfloat16")
    assert "tensor_core" not in _sketches(bf16_acc, _target("sm_80"))
    matmul = str(ROOT / "examples" / "matmul.py")
    assert "tensor_core" not in _sketches(_task("matmul", "M=64", "N=64", "K=64", path=matmul),
                                          _target("sm_80"))
    # fp16 accumulation where the workload computes in fp16
    half = _task("matmul", "M=64", "N=64", "K=64", "dtype=float16", path=matmul)
    assert "tensor_core" in _sketches(half, _target("sm_80"))


def test_gemm_roles_of_convolution_batch_matmul_and_dense():
    from tvm import s_tir

    from search_space.cuda.gemm_form import gemm_roles

    def roles(task, block):
        sch = s_tir.Schedule(task.mod)
        return gemm_roles(sch, sch.get_sblock(block))

    conv = roles(_task("conv2d_nhwc_mp", "N=2", "H=7", "W=7", "C=8", "F=24"), "conv")
    assert conv.groups == {"m": (0, 1, 2), "n": (3,), "k": (4, 5, 6)}
    assert conv.extents == {"m": 98, "n": 24, "k": 72} and not conv.b_kn
    bmm = roles(_task("batch_matmul_mp", "B=3", "M=32", "N=48", "K=16"), "C")
    assert bmm.groups == {"batch": (0,), "m": (1,), "n": (2,), "k": (3,)} and bmm.b_kn
    dense = roles(_task("dense_bias_gelu_mp", "M=32", "N=48", "K=64"), "dense")
    assert (dense.in_dtype, dense.acc_dtype, dense.b_kn) == ("float16", "float32", False)


def test_dynamic_shared_memory_is_the_opt_in_limit():
    """Candidates may use dynamic shared memory up to the target's opt-in maximum, and
    the check holds a kernel to the limit of the target it is checked for."""
    from search_space import generate_space
    from search_space.cuda.limits import kernel_usage
    from search_space.cuda.lowering import lower_for_check
    from search_space.cuda.tensor_core_budget import pipeline_bytes, staging_bytes

    task = _task("matmul_mp", "M=512", "N=512", "K=512")
    big = _target("sm_80", max_dynamic_shared_memory_per_block=A100_DYNAMIC)
    space = generate_space(task, big)
    decisions = {"C.warps_m": 2, "C.warps_n": 4, "C.frags_m": 4, "C.frags_n": 2,
                 "C.k_chunk": 64, "C.stages": 3, "C.vector": 8, "C.raster": 2, "C.unroll": 0,
                 "C.frag_buffers": 1, "C.out_vector": 4}
    from search_space.candidate import Candidate

    mod = space.apply(Candidate.make("tensor_core", decisions))
    (use,) = kernel_usage(lower_for_check(mod, big.tvm()))
    # 3 stages of A [128, 64 + 8] and B [64, 128 + 8] halves (dynamic); one fp32 16 x 16
    # staging tile per warp, 8 warps (static)
    assert use.dynamic_shared_bytes == 3 * (128 * 72 + 64 * 136) * 2 == pipeline_bytes(
        128, 128, 64, 3, True)
    assert use.shared_bytes == 8 * 16 * 16 * 4 == staging_bytes(2, 4, 4)
    assert space.check(mod) is None
    small = generate_space(task, _target("sm_80"))
    assert small.check(mod) == (
        f"kernel 0 uses {use.dynamic_shared_bytes} bytes of dynamic shared memory (and "
        f"{use.shared_bytes} static) per block; the target allows 49152 in all")
    # sampled without the opt-in, every candidate fits 48 KiB by construction
    rng = random.Random(0)
    for _ in range(6):
        _, m = small.sample(rng, sketch="tensor_core")
        assert small.check(m) is None


CPU_CASES = [
    ("matmul_mp", ["M=40", "N=24", "K=40"]),
    ("matmul_mp", ["M=48", "N=40", "K=24", "dtype=bfloat16"]),
    ("batch_matmul_mp", ["B=2", "M=32", "N=48", "K=32"]),
    ("dense_bias_gelu_mp", ["M=32", "N=48", "K=64"]),
    ("conv2d_nhwc_mp", ["N=2", "H=7", "W=7", "C=8", "F=24", "stride=2"]),
]


@pytest.mark.parametrize("workload,args", CPU_CASES)
def test_schedule_index_arithmetic_equals_the_reference_on_cpu(workload, args):
    """The sampled schedule with threads serial, buffers in plain memory and each
    intrinsic as its description: built for llvm, bit-equal to the unscheduled
    computation (same products, same summation order)."""
    from tvm import s_tir

    from search_space.cuda.limits import GpuLimits
    from search_space.cuda.tensor_core import CPU_CHECK, TensorCoreSketch
    from search_space.decisions import Decider

    task = _task(workload, *args)
    target = _target("sm_80")
    inputs = normal_inputs(task)
    ref = run_llvm(task.mod, task, inputs)
    sketch = TensorCoreSketch(GpuLimits.of(target), target, CPU_CHECK)
    for seed in range(2):
        sch = s_tir.Schedule(task.mod)
        sketch.apply(sch, Decider(rng=random.Random(seed), strict=False))
        got = run_llvm(sch.mod, task, inputs)
        for g, r in zip(got, ref):
            assert np.array_equal(g, r), (seed, np.abs(g.astype("f8") - r.astype("f8")).max())


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_sampled_candidates_compile_with_hmma_and_ldgsts_for_sm80_and_sm90a(tmp_path):
    """Two distinct samples per operator (the bench runs 64): each fits the target and
    compiles for both archs with HMMA and LDGSTS and no local memory in its SASS. In a
    subprocess: a process that compiled CUDA keeps TVM's CUDA runtime registered."""
    from support.sass_tools import skip_without_cuobjdump

    skip_without_cuobjdump()
    out = tmp_path / "dry_run.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "sketch_sass_dry_run.py"),
                          "--sketches", "tensor_core", "--per-op", "2", "--seed", "1",
                          "--json", str(out)],
                         env=env, capture_output=True, text=True, timeout=600, cwd=ROOT,
                         check=False)
    rows = json.loads(out.read_text())["rows"]
    assert [r["case"] for r in rows] == ["mma_matmul_fp16_odd", "mma_matmul_bf16",
                                         "mma_batch_matmul_fp16", "mma_dense_bias_gelu_fp16",
                                         "mma_conv2d_nhwc_resnet50"], run.stdout[-3000:]
    for r in rows:
        assert (r["sampled"], r["compiled"], r["passed"]) == (2, 2, 2), r
        assert all(m["HMMA"] > 0 and m["LDGSTS"] > 0 for m in r["min"].values()), r
