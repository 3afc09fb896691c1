"""Divisions by a value fixed along a block's innermost axis become multiplications by
its reciprocal (one division per row); every other division stays, and the rows
sketch's kernels still equal the division."""
from __future__ import annotations

import random

import numpy as np

from autosched.workload import definition, make_task
from search_space import generate_space
from search_space.cpu.reciprocal import reciprocal_form

from support.cpu_cases import run_module


def normalise(M=6, N=40):
    """y[i, j] = x[i, j] / s[i] + x[i, j] / w[j] + x[i, j] / 3, s the row sums."""
    from tvm import te

    x = te.placeholder((M, N), name="x")
    w = te.placeholder((N,), name="w")
    k = te.reduce_axis((0, N), name="k")
    s = te.compute((M,), lambda i: te.sum(x[i, k], axis=k), name="s")
    y = te.compute((M, N), lambda i, j: x[i, j] / s[i] + x[i, j] / w[j] + x[i, j] / 3.0,
                   name="y")
    return x, w, y


def test_only_divisions_fixed_along_the_inner_axis_are_rewritten():
    task = make_task(definition(normalise), {})
    script = reciprocal_form(task.func).script()
    assert "x[v_i, v_j] * (T.float32(1.0) / s[v_i])" in script
    assert "x[v_i, v_j] * T.float32(0.33333334" in script      # 1 / 3, folded
    assert "x[v_i, v_j] / w[v_j]" in script                    # varies along j: kept
    assert script.count(" / ") == 2


def test_the_rows_sketch_rewrites_a_computation_once(target):
    from search_space.decisions import Decider

    task = make_task(definition(normalise), {})
    rows = generate_space(task, target).sketches["rows"]
    first = rows.program(task.func, Decider())
    assert rows.program(task.func, Decider()) is first
    other = make_task(definition(normalise), {"N": 48})
    assert rows.program(other.func, Decider()) is not first


def test_rows_kernels_with_reciprocals_equal_the_division(target):
    task = make_task(definition(normalise), {})
    rng = np.random.default_rng(0)
    x = rng.uniform(0.5, 1.5, (6, 40)).astype("float32")
    w = rng.uniform(0.5, 1.5, 40).astype("float32")
    want = x / x.sum(1, keepdims=True) + x / w + x / 3
    space = generate_space(task, target)
    pick = random.Random(0)
    for _ in range(3):
        cand, mod = space.sample(pick, "rows")
        assert "1.0) / s[" in mod["main"].script(), cand.dumps()
        got = run_module(mod, target, [x, w], task.outputs[-1])
        np.testing.assert_allclose(got, want, rtol=2e-6, err_msg=cand.dumps())
