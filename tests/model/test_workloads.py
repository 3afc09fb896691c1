"""Every model workload computes what its torch twin computes (the twin is the baseline
the kernel is timed against and the operator the backend replaces), on odd shapes.

The unscheduled tensor expression is built for the CPU and run on random inputs; float32
results agree with torch to rtol 1e-4 / atol 1e-4 (sums of up to a few hundred terms in
another order)."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from autosched.model.workloads import WORKLOADS

# small odd sizes for every shape parameter a workload has
SIZES = {"M": 13, "N": 21, "K": 11, "B": 3, "C": 5, "H": 9, "W": 7, "L": 17}


def _params(workload) -> dict:
    signature = inspect.signature(workload.te_func)
    params = {k: p.default for k, p in signature.parameters.items() if k not in workload.fixed}
    params.update({k: v for k, v in SIZES.items() if k in params})
    return params


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_workload_equals_its_torch_twin(name):
    from support.cpu_cases import inputs_for, run_module

    from autosched.target import resolve_target
    from autosched.workload import make_task

    workload = WORKLOADS[name]
    params = _params(workload)
    task = make_task(workload.definition(), params)
    args = inputs_for(task, seed=1)
    ours = run_module(task.mod, resolve_target("llvm"), args, task.outputs[-1])
    theirs = workload.torch_call([torch.from_numpy(a) for a in args], params)
    assert tuple(theirs.shape) == task.outputs[-1].shape
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-4, atol=1e-4)
