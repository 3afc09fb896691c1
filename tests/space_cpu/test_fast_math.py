"""Vectorisable exp / tanh: stated accuracy, special values, and the `fast_math` decision
that schedules a task's fast form while the task itself stays the exact computation."""
from __future__ import annotations

import os

import numpy as np
import pytest

import autosched
from autosched.fast_math import fast_exp, fast_tanh
from autosched.task import TensorSpec
from search_space import Candidate

from .conftest import ROOT, inputs_for, reference, run_module, small_space, small_task

SPECIALS = np.array([0.0, -0.0, 1e-30, -1e-30, 0.29, 0.31, -0.31, 20.0, -20.0, 88.72,
                     88.73, -86.5, -86.7, -104.0, 1e30, -1e30, np.inf, -np.inf, np.nan],
                    dtype=np.float32)


def _elementwise(fn, x: np.ndarray, target) -> np.ndarray:
    import tvm
    from tvm import te

    a = te.placeholder(x.shape, name="a")
    b = te.compute(x.shape, lambda i: fn(a[i]), name="b")
    sch = tvm.s_tir.Schedule(te.create_prim_func([a, b]))
    (loop,) = sch.get_loops(sch.get_sblock("b"))
    sch.vectorize(sch.split(loop, [None, 16])[1])
    return run_module(sch.mod, target, [x], TensorSpec("b", x.shape, "float32"))


def _sample(n: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    body = np.concatenate([rng.uniform(-86.6, 88.72, n), rng.standard_normal(n) * 3])
    pad = (-(len(body) + len(SPECIALS))) % 16
    return np.concatenate([body, np.zeros(pad), SPECIALS]).astype(np.float32)


def test_fast_exp_relative_error_and_special_values(target):
    x = _sample(50_000)
    got = _elementwise(fast_exp, x, target).astype(np.float64)
    normal = (x > -86.6) & (x <= 88.72)
    want = np.exp(x[normal].astype(np.float64))
    assert (np.abs(got[normal] - want) / want).max() <= 2e-7
    assert np.abs(got[x <= -86.6]).max() <= 2.4e-38          # flushed to zero below
    s = got[-len(SPECIALS):]
    assert s[0] == s[1] == 1.0
    assert np.isinf(s[10]) and s[10] > 0                        # 88.73 > ln(FLT_MAX)
    assert s[12] == s[13] == s[15] == s[17] == 0.0              # -86.7, -104, -1e30, -inf
    assert np.isposinf(s[14]) and np.isposinf(s[16])
    assert np.isnan(s[18])


def test_fast_tanh_relative_error_and_special_values(target):
    x = _sample(50_000)
    got = _elementwise(fast_tanh, x, target).astype(np.float64)
    want = np.tanh(x.astype(np.float64))
    nonzero = (want != 0) & ~np.isnan(want)
    assert (np.abs(got[nonzero] - want[nonzero]) / np.abs(want[nonzero])).max() <= 1e-6
    s = got[-len(SPECIALS):]
    assert s[0] == 0.0 and s[2] == pytest.approx(1e-30, rel=1e-6)
    assert s[4] == pytest.approx(np.tanh(0.29), rel=1e-6)      # the series side
    assert s[5] == pytest.approx(np.tanh(0.31), rel=1e-6)      # the exp side
    assert s[14] == 1.0 and s[15] == -1.0 and s[16] == 1.0 and s[17] == -1.0
    assert np.isnan(s[18])


def test_tasks_get_a_fast_form_only_for_float32_exp_or_tanh():
    from tvm import te, tirx

    library = (te.exp, te.tanh, tirx.exp, tirx.tanh)
    path = os.path.join(ROOT, "examples", "softmax.py")
    (soft32,) = autosched.load_tasks(path, ["softmax"], ["M=8", "N=16"])
    (soft64,) = autosched.load_tasks(path, ["softmax"], ["M=8", "N=16", "dtype=float64"])
    (norm,) = autosched.load_tasks(path, ["layer_norm"], ["M=8", "N=16"])
    assert list(soft32.variants) == ["fast_math"]
    assert soft64.variants == {} and norm.variants == {}
    assert small_task("dense_gelu").variants.keys() == {"fast_math"}       # tanh
    assert small_task("matmul").variants == {}
    # the fast form is a variant: the task, its key and its reference stay exact
    assert "tirx.exp" in soft32.canonical
    assert (te.exp, te.tanh, tirx.exp, tirx.tanh) == library               # restored


@pytest.mark.parametrize("fast", [False, True])
def test_the_decision_schedules_the_fast_form(fast, target):
    import tvm

    space = small_space("softmax", target)
    task = small_task("softmax")
    cand = Candidate.make("rows", {"fast_math": fast, "inline.exp": True,
                                   "row_max.rfactor": 16, "row_sum.rfactor": 16,
                                   "softmax.unroll": 0, "softmax.vector": 16})
    mod = space.apply(cand)
    asm = tvm.compile(mod, target=target.tvm()).mod.inspect_source("asm")
    assert ("expf" in asm) is not fast
    args = inputs_for(task)
    got = run_module(mod, target, args, task.outputs[-1])
    np.testing.assert_allclose(got, reference("softmax", args), rtol=1e-6, atol=1e-7)
