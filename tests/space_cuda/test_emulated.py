"""The kernels the CUDA sketches generate compute the right values: each is run on
the CPU by the emulator (tests/support/cuda_emulator.py) at a small shape and
compared with the unscheduled function built for llvm."""
from __future__ import annotations

import numpy as np
import pytest


def _check(task, cand, mod, target, emulator, reference):
    rng = np.random.default_rng(0)
    inputs = {s.name: rng.standard_normal(s.shape).astype(s.dtype) for s in task.inputs}
    want = reference(task, inputs)
    got = emulator.emulate(mod, target, inputs, {s.name: (s.shape, s.dtype) for s in task.outputs})
    for name, ref in want.items():
        assert np.abs(ref).max() > 0
        np.testing.assert_allclose(got[name], ref, rtol=1e-4, atol=1e-4, err_msg=cand.dumps())


def _space(task, target):
    from search_space import generate_space

    return generate_space(task, target)


@pytest.mark.parametrize("workload, sketch", [
    ("matmul", "tile"),
    ("conv2d", "tile"),
    ("dense_bias_gelu", "tile"),
    ("softmax", "rows_fused"),
    ("layer_norm", "rows"),
])
def test_emulated_kernel_matches_reference(small_tasks, cuda_target, cuda_emulator, reference,
                                           distinct_samples, workload, sketch):
    task = small_tasks[workload]
    space = _space(task, cuda_target)
    samples = distinct_samples(space, 1, seed=21, sketch=sketch)
    assert len(samples) == 1
    for cand, mod in samples:
        assert space.check(mod) is None
        _check(task, cand, mod, cuda_target, cuda_emulator, reference)


@pytest.mark.slow
@pytest.mark.parametrize("workload", ["matmul", "conv2d", "depthwise_conv2d", "softmax",
                                      "layer_norm", "dense_bias_gelu", "batch_matmul"])
def test_every_sketch_emulates_correctly(small_tasks, cuda_target, cuda_emulator, reference,
                                         distinct_samples, workload):
    task = small_tasks[workload]
    space = _space(task, cuda_target)
    checked = 0
    for sketch in sorted(space.sketches):
        for cand, mod in distinct_samples(space, 2, seed=5, sketch=sketch):
            if space.check(mod) is None:
                _check(task, cand, mod, cuda_target, cuda_emulator, reference)
                checked += 1
    # two samples of every sketch, one of the decision-free default; all fit these shapes
    assert checked == 2 * len(space.sketches) - 1


def test_emulator_runs_warp_shuffles(cuda_emulator):
    """A block-wide sum through shuffles and shared memory, as TVM's allreduce does."""
    src = r'''
extern "C" __global__ void __launch_bounds__(64) main_kernel(float* __restrict__ x_ptr, float* __restrict__ y_ptr) {
  __shared__ alignas(64) float part[2];
  float v = x_ptr[blockIdx.x * 64 + threadIdx.x];
  uint mask = __activemask();
  for (int d = 16; d > 0; d >>= 1) v += __shfl_down_sync(mask, v, d, 32);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) y_ptr[blockIdx.x] = part[0] + part[1];
}
'''
    x = np.arange(3 * 64, dtype="float32").reshape(3, 64)
    out = cuda_emulator.emulate_source(src, [([3, 1, 1], [64, 1, 1])], {"x": x},
                                       {"y": ((3,), "float32")})
    np.testing.assert_array_equal(out["y"], x.sum(axis=1))


def test_emulator_catches_misaligned_vector_loads(cuda_emulator):
    src = r'''
extern "C" __global__ void __launch_bounds__(4) main_kernel(float* __restrict__ x_ptr, float* __restrict__ y_ptr) {
  *(float4*)(y_ptr + threadIdx.x * 4) = *(float4*)(x_ptr + threadIdx.x * 4 + 1);
}
'''
    with pytest.raises(RuntimeError, match="misaligned address"):
        cuda_emulator.emulate_source(src, [([1, 1, 1], [4, 1, 1])],
                                     {"x": np.zeros(32, "float32")},
                                     {"y": ((16,), "float32")})


def test_column_reduction_uses_unfused_cross_thread_kernels(cuda_target, cuda_emulator,
                                                            reference, distinct_samples):
    """A reduction over the first axis cannot be fused into the output's rows; its
    cross-thread kernel still computes the right values."""
    from tvm import te

    from autosched.workload import WorkloadDef, make_task

    def colnorm(M=70, N=12):
        x = te.placeholder((M, N), name="x")
        k = te.reduce_axis((0, M), name="k")
        s = te.compute((N,), lambda j: te.sum(x[k, j] * x[k, j], axis=k), name="colsq")
        y = te.compute((M, N), lambda i, j: x[i, j] / s[j], name="y")
        return x, y

    task = make_task(WorkloadDef("colnorm", colnorm, {"M": 70, "N": 12}), {})
    space = _space(task, cuda_target)
    assert set(space.sketches) == {"default", "simple", "rows"}
    for cand, mod in distinct_samples(space, 1, seed=3, sketch="rows"):
        assert space.check(mod) is None
        _check(task, cand, mod, cuda_target, cuda_emulator, reference)
