"""`search_space.cuda.reference_schedule`, the plain GPU schedule the correctness
reference runs on the device: every example operator, scheduled by it, computes the
CPU's values under the emulator (tests/support/cuda_emulator.py), fits the target's
limits, and compiles with nvcc for sm_90."""
from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

EXAMPLES_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "examples")
NN_SHAPE = ["M=16", "N=40", "K=24"]


def _nn_tasks():
    from autosched.workload import load_tasks

    return {t.workload: t for t in load_tasks(os.path.join(EXAMPLES_DIR, "nn_ops.py"),
                                              arg_items=NN_SHAPE)}


NN_WORKLOADS = ("linear", "linear_grad_x", "linear_grad_w", "linear_grad_b", "matmul_grad_a",
                "matmul_grad_b", "gelu", "gelu_grad", "softmax", "softmax_grad", "layer_norm",
                "layer_norm_grad_x", "layer_norm_grad_gamma", "layer_norm_grad_beta")
SMALL_WORKLOADS = ("matmul", "conv2d", "depthwise_conv2d", "softmax", "layer_norm",
                   "dense_bias_gelu", "batch_matmul")


@pytest.fixture(scope="module")
def nn_tasks():
    return _nn_tasks()


def _scheduled(task, target):
    from search_space.cuda import GpuLimits, reference_schedule

    return reference_schedule(task.mod, GpuLimits.of(target))


def _launches(mod, target):
    """(grid x, block x) of every kernel of a scheduled module."""
    from search_space.cuda.limits import kernel_usage
    from search_space.cuda.lowering import lower_for_check

    return [(u.extents.get("blockIdx.x"), u.extents.get("threadIdx.x"))
            for u in kernel_usage(lower_for_check(mod, target.tvm()))]


def _emulate_and_compare(task, target, emulator, reference):
    mod = _scheduled(task, target)
    rng = np.random.default_rng(1)
    inputs = {s.name: rng.uniform(-1, 1, s.shape).astype(s.dtype) for s in task.inputs}
    want = reference(task, inputs)
    got = emulator.emulate(mod, target, inputs, {s.name: (s.shape, s.dtype)
                                                 for s in task.outputs})
    for name, ref in want.items():
        assert np.abs(ref).max() > 0
        np.testing.assert_allclose(got[name], ref, rtol=1e-4, atol=1e-5, err_msg=name)
    return mod


@pytest.mark.parametrize("workload", SMALL_WORKLOADS)
def test_reference_schedule_emulates_correctly(small_tasks, cuda_target, cuda_emulator,
                                               reference, workload):
    task = small_tasks[workload]
    mod = _emulate_and_compare(task, cuda_target, cuda_emulator, reference)
    from search_space.cuda.limits import check_module

    assert check_module(mod, cuda_target) is None


@pytest.mark.parametrize("workload", NN_WORKLOADS)
def test_reference_schedule_emulates_every_nn_op(nn_tasks, cuda_target, cuda_emulator,
                                                 reference, workload):
    _emulate_and_compare(nn_tasks[workload], cuda_target, cuda_emulator, reference)


def test_each_block_is_its_own_kernel_over_all_its_outputs(small_tasks, cuda_target):
    """Softmax at 8x200: row max, exp, row sum and division are four kernels (nothing
    is inlined); each covers its block's spatial extent with 256-thread blocks (a row
    reduction has 8 outputs: one block of 8 threads; exp and the output 1600: 7
    blocks); matmul 64x32 is one kernel of 2048 threads, its K loop serial in each."""
    assert _launches(_scheduled(small_tasks["softmax"], cuda_target), cuda_target) == [
        (1, 8), (7, 256), (1, 8), (7, 256)]
    assert _launches(_scheduled(small_tasks["matmul"], cuda_target), cuda_target) == [(8, 256)]


def test_it_is_the_default_sketch(small_tasks, cuda_target):
    """The space's decision-free `default` candidate is the same schedule."""
    import tvm

    from search_space import generate_space

    task = small_tasks["layer_norm"]
    space = generate_space(task, cuda_target)
    default = space.apply(space.default_candidate())
    tvm.ir.assert_structural_equal(default, _scheduled(task, cuda_target))


COMPILE_ALL = """
import json, os, sys
from autosched.measure.cuda import fatbin
from autosched.measure.cuda.compiler import CudaCompileError, build_cuda
from autosched.target import resolve_target
from autosched.workload import load_tasks
from search_space.cuda import GpuLimits, reference_schedule

examples, files = sys.argv[1], sys.argv[2:]
target = resolve_target("cuda")
library = os.path.join(os.environ["OUT_DIR"], "k.so")
out = {}
for name in files:
    for task in load_tasks(os.path.join(examples, name)):
        try:
            build = build_cuda(reference_schedule(task.mod, GpuLimits.of(target)),
                               target.config)
            build.executable.export_library(library)
            out[f"{name}:{task.workload}"] = [e.arch for e in fatbin.library_entries(library)]
        except CudaCompileError as e:
            out[f"{name}:{task.workload}"] = str(e)
print("RESULT", json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_reference_schedule_compiles_with_nvcc_at_the_default_shape(tmp_path):
    """Every workload of the example op files, at its default shape, through the one
    CUDA compile path (in a subprocess: it registers TVM's CUDA runtime for good)."""
    import json
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    files = ("matmul.py", "conv2d.py", "softmax.py", "dense_gelu.py", "batch_matmul.py",
             "nn_ops.py")
    env = dict(os.environ, PYTHONPATH=root, OUT_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", COMPILE_ALL, EXAMPLES_DIR, *files], env=env,
                         capture_output=True, text=True, timeout=900, cwd=root)
    assert out.returncode == 0, out.stderr[-3000:]
    built = json.loads(next(ln for ln in out.stdout.splitlines()
                            if ln.startswith("RESULT "))[len("RESULT "):])
    names = {k.split(":")[1] for k in built}
    assert set(NN_WORKLOADS) | set(SMALL_WORKLOADS) <= names
    assert {k: v for k, v in built.items() if v != ["sm_90"]} == {}
