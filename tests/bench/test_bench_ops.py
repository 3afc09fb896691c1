"""Every operator the benches compare against torch computes what its torch function
computes (the peer timed beside it must be the same operator), on small odd shapes of
each: the unscheduled tensor expression built for the CPU, on the bench's own inputs."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from ops import EXAMPLES, SETS, torch_fn  # noqa: E402
from peers import random_args  # noqa: E402

# small sizes for every shape parameter (channel counts divisible by the bench's 4 groups)
SMALL = {"M": 13, "N": 6, "K": 11, "B": 3, "C": 8, "F": 8, "H": 9, "W": 7, "L": 17, "D": 5}
ALL = {op.name: op for ops in SETS.values() for op in ops}


def small_task(op):
    """The op at the bench's structure (its stride, dilation, groups, padding) and small
    sizes."""
    from autosched.workload import load_op_file, load_tasks

    params = load_op_file(str(EXAMPLES / op.op_file))[op.workload].params
    args = dict(a.split("=") for a in op.args)
    args.update({k: str(v) for k, v in SMALL.items() if k in params})
    items = [f"{k}={v}" for k, v in args.items()]
    (task,) = load_tasks(str(EXAMPLES / op.op_file), [op.workload], items)
    return task


@pytest.mark.parametrize("name", sorted(ALL))
def test_bench_operator_equals_its_torch_function(name, target):
    from support.cpu_cases import run_module

    op = ALL[name]
    task = small_task(op)
    args = random_args(task, seed=2, positive=op.positive)[:len(task.inputs)]
    ours = run_module(task.mod, target, args, task.outputs[-1])
    theirs = torch_fn(task)(*[torch.from_numpy(a) for a in args])
    assert tuple(theirs.shape) == task.outputs[-1].shape
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-4, atol=1e-4)
    assert np.isfinite(ours).all()


def test_the_broad_set_covers_what_users_write():
    """At least 12 operators beyond the examples: convolution variants, norms,
    attention and odd shapes."""
    names = {op.name for op in SETS["broad"]}
    assert len(names) >= 12
    assert names.isdisjoint(op.name for op in SETS["examples"])
