"""Rules found by analysis fit programs they were not written for: the sketches each
gets, and sampled schedules that compute what the unscheduled program computes."""
from __future__ import annotations

import os
import random

import numpy as np
import pytest

from support.cpu_cases import inputs_for, run_module

OPS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "generic_ops.py")
EXPECTED = {
    "row_sum": ["default", "rows"],
    "relu": ["default", "rows"],
    "matmul_bias_relu": ["default", "microkernel", "tile", "tile_pack"],
    "two_matmuls": ["default", "microkernel", "tile", "tile_pack"],
    "conv_relu": ["default", "microkernel", "tile", "tile_pack"],
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_generic_workloads(name, target):
    import autosched
    from search_space import generate_space

    (task,) = autosched.load_tasks(OPS, [name])
    space = generate_space(task, target)
    assert sorted(space.sketches) == EXPECTED[name]
    args = inputs_for(task, seed=1)
    want = run_module(task.mod, target, args, task.outputs[-1])
    rng = random.Random(7)
    for sketch in EXPECTED[name][1:]:
        for _ in range(2):
            cand, mod = space.sample(rng, sketch)
            got = run_module(mod, target, args, task.outputs[-1])
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=cand.dumps())


def test_chain_is_fused_into_the_tiles(target):
    """matmul -> +bias -> relu: both consumers fold into one stage inside the tiles."""
    import autosched
    from search_space import generate_space

    (task,) = autosched.load_tasks(OPS, ["matmul_bias_relu"])
    space = generate_space(task, target)
    cand, mod = space.sample(random.Random(3), "tile")
    text = mod.script()
    assert 'T.sblock("d")' in text and 'T.sblock("e")' not in text
    assert "write_at" in " ".join(cand.values()) and "c.cache_write" not in cand.values()
