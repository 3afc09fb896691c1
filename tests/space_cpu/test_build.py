"""Sampled schedules of every example operator build and compute the right answer."""
from __future__ import annotations

import random

import numpy as np
import pytest

from support.cpu_cases import CASES, inputs_for, reference, run_module, small_space, small_task


@pytest.mark.parametrize("case", sorted(CASES))
def test_sampled_candidates_match_numpy(case, target):
    task = small_task(case)
    space = small_space(case, target)
    args = inputs_for(task)
    want = reference(case, args)
    rng = random.Random(101)
    built = []
    for sketch in sorted(space.sketches):
        for _ in range(1 if sketch == "default" else 2):
            cand, mod = space.sample(rng, sketch)
            assert cand.sketch == sketch
            got = run_module(mod, target, args, task.outputs[-1])
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4,
                                       err_msg=cand.dumps())
            built.append(cand)
    # every sketch the case is known to offer was built and checked, each non-default
    # one from two distinct candidates
    assert sorted(space.sketches) == sorted(CASES[case][4])
    assert len(set(built)) == len(built) == 1 + 2 * (len(CASES[case][4]) - 1)
