"""`split_reduce` on CUDA (search_space/cuda/split_reduction.py): a reduction to one
value per batch runs on many thread blocks (a partial per block, then a small
combining kernel), its kernels compute the right values (run by the CPU emulator) and
its candidates compile for sm_90 with nvcc (the dry run, in a subprocess: compiling
registers TVM's CUDA runtime for good)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import autosched
from search_space import Candidate, generate_space

ROOT = Path(__file__).resolve().parents[2]
OPS = str(ROOT / "examples" / "reductions.py")


def _task(workload: str, *args: str):
    (task,) = autosched.load_tasks(OPS, [workload], list(args))
    return task


def _kernels(mod, target) -> list[dict]:
    """Each kernel's launch extents (thread tag -> extent), in launch order."""
    from search_space.cuda.limits import kernel_usage
    from search_space.cuda.lowering import lower_for_check

    return [dict(u.extents) for u in kernel_usage(lower_for_check(mod, target.tvm()))]


def test_one_output_reduction_spans_the_grid(cuda_target):
    space = generate_space(_task("norm_bmn"), cuda_target)
    assert "split_reduce" in space.sketches
    cand = Candidate("split_reduce", (("sq.blocks", 256), ("sq.threads", 128),
                                      ("sq.unroll", 0)))
    mod = space.apply(cand)
    assert space.check(mod) is None
    partials, combine, sqrt = _kernels(mod, cuda_target)
    # 256 blocks of 128 threads each reduce a part; one block of 256 threads (a thread
    # per partial) combines them; the sqrt runs on the one output
    assert partials == {"blockIdx.x": 256, "threadIdx.x": 128}
    assert combine == {"blockIdx.x": 1, "threadIdx.x": 256}
    assert sqrt == {"blockIdx.x": 1, "threadIdx.x": 1}


def test_offered_only_for_few_outputs(cuda_target):
    assert "split_reduce" in generate_space(_task("vector_sum"), cuda_target).sketches
    many = generate_space(_task("norm_bmn", "B=256", "M=64", "N=1024"), cuda_target)
    assert "split_reduce" not in many.sketches and "rows" in many.sketches
    small = generate_space(_task("vector_sum", "N=4096"), cuda_target)
    assert "split_reduce" not in small.sketches


@pytest.mark.parametrize("workload, args, decisions", [
    ("norm_bmn", ("M=64", "N=1024"), (("sq.blocks", 64), ("sq.threads", 128),
                                      ("sq.unroll", 16))),
    # max over two axes, the magnitude stage inlined; 2 x 64 blocks, a ragged last step
    ("max_abs", ("M=259", "N=255"), (("amax.blocks", 64), ("amax.threads", 64),
                                     ("amax.unroll", 0))),
    ("column_min", ("M=70001",), (("colmin.blocks", 128), ("colmin.threads", 64),
                                  ("colmin.unroll", 0))),
])
def test_emulated_kernels_match_numpy(cuda_target, cuda_emulator, workload, args, decisions):
    task = _task(workload, *args)
    space = generate_space(task, cuda_target)
    mod = space.apply(Candidate("split_reduce", decisions))
    assert space.check(mod) is None
    x = np.random.default_rng(3).uniform(-1, 1, task.inputs[0].shape).astype("float32")
    out = task.outputs[-1]
    got = cuda_emulator.emulate(mod, cuda_target, {task.inputs[0].name: x},
                                {out.name: (out.shape, out.dtype)})[out.name]
    want = {"norm_bmn": lambda: np.sqrt((x.astype(np.float64) ** 2).sum(axis=(1, 2))),
            "max_abs": lambda: np.abs(x).max(axis=(1, 2)),
            "column_min": lambda: x.min(axis=0)}[workload]()
    np.testing.assert_allclose(got, want, rtol=1e-5)


DRY_RUN = textwrap.dedent("""
    import json, sys
    from autosched import dry_run_task, load_tasks, resolve_target
    (task,) = load_tasks(sys.argv[1], ["norm_bmn"], [])
    report = dry_run_task(task, resolve_target("cuda"), 2, seed=0, sketch="split_reduce")
    print("RESULT", json.dumps({"compiled": report.compiled, "compiler": report.compiler,
                                "failures": report.first_errors}))
""")


@pytest.mark.slow   # nvcc, one kernel after another: about 15 s on 2 cores
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_candidates_compile_for_sm_90():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", DRY_RUN, OPS], env=env, capture_output=True,
                         text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT "))
    assert json.loads(line[len("RESULT "):]) == {"compiled": 2, "compiler": "nvcc",
                                                 "failures": []}
