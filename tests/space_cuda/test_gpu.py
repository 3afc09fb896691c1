"""On a machine with an NVIDIA GPU: sampled candidates of each CUDA sketch run on the
device and match the unscheduled function built for the CPU."""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpu():
    import tvm

    dev = tvm.cuda(0)
    if not dev.exist:
        pytest.skip("needs an NVIDIA GPU")
    return dev


@pytest.mark.parametrize("workload", ["matmul", "conv2d", "depthwise_conv2d", "softmax",
                                      "layer_norm", "dense_bias_gelu", "batch_matmul"])
def test_candidates_run_correctly_on_the_gpu(gpu, small_tasks, cuda_target, reference,
                                            distinct_samples, workload):
    import tvm

    from search_space import generate_space

    task = small_tasks[workload]
    space = generate_space(task, cuda_target)
    rng = np.random.default_rng(0)
    inputs = {s.name: rng.standard_normal(s.shape).astype(s.dtype) for s in task.inputs}
    want = reference(task, inputs)
    for sketch in sorted(space.sketches):
        for cand, mod in distinct_samples(space, 3, seed=13, sketch=sketch):
            assert space.check(mod) is None
            lib = tvm.compile(mod, target=cuda_target.tvm()).jit()
            args = [tvm.runtime.tensor(inputs[s.name], gpu) for s in task.inputs]
            outs = [tvm.runtime.tensor(np.zeros(s.shape, s.dtype), gpu) for s in task.outputs]
            lib["main"](*args, *outs)
            for s, out in zip(task.outputs, outs):
                np.testing.assert_allclose(out.numpy(), want[s.name], rtol=1e-4, atol=1e-4,
                                           err_msg=cand.dumps())
