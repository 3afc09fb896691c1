"""Row statistics in one pass (`rows_one_pass`): offered by analysis to softmax and layer
norm however they are written, never to matmul; outputs equal numpy's on odd and
degenerate shapes, with and without fast math; one reduction pass over the row."""
from __future__ import annotations

import os

import numpy as np
import pytest
from support.cpu_cases import CASES, inputs_for, run_module

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples", "softmax.py")
ROW_OPS = os.path.join(ROOT, "tests", "data", "row_stats_ops.py")


_softmax = CASES["softmax"][3]
_layer_norm = CASES["layer_norm"][3]


def _log_softmax(x):
    shifted = x - x.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


# name -> (op file, workload, numpy reference of float64 inputs)
WORKLOADS = {
    "softmax": (EXAMPLES, "softmax", _softmax),
    "topi_softmax": (ROW_OPS, "topi_softmax", _softmax),
    "topi_log_softmax": (ROW_OPS, "topi_log_softmax", _log_softmax),
    "layer_norm": (EXAMPLES, "layer_norm", _layer_norm),
    "topi_layer_norm": (ROW_OPS, "topi_layer_norm", _layer_norm),
}
# the tolerance against the float64 reference: rtol and atol relative to max |ref|;
# fast math's exp is within 2e-7 of the true value, the same bound holds
RTOL = 1e-5


def _task(name, M, N):
    import autosched

    path, workload, _ = WORKLOADS[name]
    (task,) = autosched.load_tasks(path, [workload], [f"M={M}", f"N={N}"])
    return task


def _space(task, target):
    from search_space import generate_space

    return generate_space(task, target)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_offered_to_row_statistics_however_written(name, target):
    space = _space(_task(name, 4, 48), target)
    assert sorted(space.sketches) == ["default", "rows", "rows_one_pass"]


def test_not_offered_without_a_pair(target):
    """RMS norm is one reduction (one pass already: `rows` schedules it); matmul is a
    contraction."""
    import autosched

    (rms,) = autosched.load_tasks(ROW_OPS, ["rms_norm"])
    assert sorted(_space(rms, target).sketches) == ["default", "rows"]
    (mm,) = autosched.load_tasks(os.path.join(ROOT, "examples", "matmul.py"), ["matmul"],
                                 ["M=64", "N=64", "K=64"])
    assert "rows_one_pass" not in _space(mm, target).sketches


def _row_reductions(func) -> list:
    from tvm import s_tir

    from search_space.analysis import analyse
    from search_space.blocks import blocks

    sch = s_tir.Schedule(func)
    infos = [analyse(sch, b) for b in blocks(sch)]
    return [i for i in infos if i.is_reduction and i.reduce[0].extent > 16]


@pytest.mark.parametrize("name", ["topi_softmax", "layer_norm"])
def test_one_reduction_pass_over_the_row(name):
    """The two row reductions become one pass of 16 lanes over the row (then a fold of
    16 partials per row), and every stage after it reads the row once."""
    from search_space.cpu.one_pass import one_pass_form

    task = _task(name, 8, 768)
    assert len(_row_reductions(task.func)) == 2
    form = one_pass_form(task.func, 16)
    (single,) = _row_reductions(form)
    assert [v.extent for v in single.iters] == [8, 16, 768 // 16]
    assert len(single.writes) == 2
    assert one_pass_form(task.func, 1024) is None  # rows shorter than a step


def _candidates(space, seed: int):
    """A random `rows_one_pass` candidate, with fast math off and on where the program
    has an exp to make fast."""
    import random

    from search_space import Candidate

    cand, _ = space.sample(random.Random(seed), "rows_one_pass")
    if "fast_math" not in cand.values():
        return {None: (cand, space.apply(cand))}
    out = {}
    for fast in (False, True):
        fixed = Candidate.make("rows_one_pass", dict(cand.values(), fast_math=fast))
        out[fast] = (fixed, space.apply(fixed))
    return out


SHAPES = [(777, 1000), (512, 768), (3, 48), (5, 37), (1, 1)]


@pytest.mark.parametrize("M,N", SHAPES, ids=[f"{m}x{n}" for m, n in SHAPES])
@pytest.mark.parametrize("name", ["softmax", "topi_softmax", "layer_norm", "topi_layer_norm",
                                  "topi_log_softmax"])
def test_outputs_equal_numpy(name, M, N, target):
    task = _task(name, M, N)
    space = _space(task, target)
    args = inputs_for(task, seed=3)
    if len(args) > 1:  # rows whose mean is far from 0: the shift keeps the variance exact
        args[0] = args[0] + np.float32(50.0)
    want = WORKLOADS[name][2](*[a.astype(np.float64) for a in args])
    outs = {}
    for fast, (cand, mod) in _candidates(space, seed=M + N).items():
        text = mod.script()
        if N >= 16:  # the lane pass and the normalising pass are vector loops
            assert text.count("T.vectorized(") >= 2, cand.dumps()
        got = run_module(mod, target, args, task.outputs[-1])
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=RTOL * np.abs(want).max(),
                                   err_msg=cand.dumps())
        outs[fast] = got
    if "softmax" in name and N > 1:
        assert not np.array_equal(outs[False], outs[True])  # fast math did change the exp


@pytest.mark.parametrize("tail", ["masked", "peeled"])
def test_ragged_rows_stay_vectorised(tail, target):
    """1000 = 62 x 16 + 8: sixteen lanes, the tail masked or peeled off, in the lane
    pass (its tail folded in) and in the normalising pass."""
    from search_space import Candidate

    task = _task("softmax", 7, 1000)
    space = _space(task, target)
    cand = Candidate.make("rows_one_pass", {"one_pass.lanes": 16, "fast_math": True,
                                            "softmax.vector": 16, "softmax.tail": tail,
                                            "softmax.unroll": 0})
    mod = space.apply(cand)
    text = mod.script()
    assert "T.vectorized(16)" in text
    assert ("pragma_loop_partition_hint" in text) == (tail == "peeled")
    args = inputs_for(task, seed=5)
    got = run_module(mod, target, args, task.outputs[-1])
    want = _softmax(args[0].astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=RTOL * np.abs(want).max())


def test_materialising_rows_reduce_ragged_rows_in_vectors(target):
    """`rows` on 1000-long rows (no whole 16-lane vector divides them) still reduces
    in vector partials (8 lanes), not in scalar code, and is correct."""
    import random

    task = _task("softmax", 7, 1000)
    space = _space(task, target)
    args = inputs_for(task, seed=6)
    want = _softmax(args[0].astype(np.float64))
    cand, mod = space.sample(random.Random(1), "rows")
    assert cand.values()["row_max.rfactor"] == cand.values()["row_sum.rfactor"] == 8
    got = run_module(mod, target, args, task.outputs[-1])
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=RTOL * np.abs(want).max())
