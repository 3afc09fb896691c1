"""Vectorisable exp / tanh: stated accuracy, special values, the rewrite that makes a
task's fast form (a TIR rewrite: nothing process-wide is patched), and the `fast_math`
decision that schedules it while the task itself stays the exact computation."""
from __future__ import annotations

import os
import random

import numpy as np
import pytest
from support.vector_lowering import has_scalar_loop, vectorised_text

import autosched
from autosched.task import TensorSpec
from autosched.workload import WorkloadDef, make_task
from search_space import Candidate, SearchSpace
from search_space.decisions import ChoiceDecision
from search_space.fast_math import fast_exp, fast_math_form, fast_tanh
from search_space.sketch import Sketch

from support.cpu_cases import ROOT, inputs_for, reference, run_module, small_space, small_task

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
    body = np.concatenate([rng.uniform(-87.5, 88.72, n), rng.standard_normal(n) * 3])
    pad = (-(len(body) + len(SPECIALS))) % 16
    return np.concatenate([body, np.zeros(pad), SPECIALS]).astype(np.float32)


def test_fast_exp_relative_error_and_special_values(target):
    x = _sample(50_000)
    got = _elementwise(fast_exp, x, target).astype(np.float64)
    normal = (x >= -86.98) & (x <= 88.72)
    want = np.exp(x[normal].astype(np.float64))
    assert (np.abs(got[normal] - want) / want).max() <= 2e-7
    assert (got[x < -86.99] == 0.0).all()                      # flushed to zero below
    assert np.abs(got[x < -86.98]).max() <= 1.8e-38
    s = got[-len(SPECIALS):]
    assert s[0] == s[1] == 1.0
    assert np.isinf(s[10]) and s[10] > 0                        # 88.73 > ln(FLT_MAX)
    assert s[12] == pytest.approx(np.exp(-86.7), rel=2e-7)     # still a normal float
    assert s[13] == s[15] == s[17] == 0.0                       # -104, -1e30, -inf
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


@pytest.mark.parametrize("fn", [fast_exp, fast_tanh], ids=["exp", "tanh"])
def test_the_fast_forms_stay_vectorised(fn, target):
    """TVM's VectorizeLoop scalarises a loop whose body it cannot widen (an `isnan`
    call once made every GELU epilogue a scalar loop, unrolled into its tile)."""
    from tvm import s_tir, te

    a = te.placeholder((64, 128), name="a")
    b = te.compute((64, 128), lambda i, j: fn(a[i, j]), name="b")
    sch = s_tir.Schedule(te.create_prim_func([a, b]))
    _, j = sch.get_loops(sch.get_sblock("b"))
    sch.vectorize(sch.split(j, [None, 32])[1])
    text = vectorised_text(sch.mod, target)
    assert not has_scalar_loop(text)
    assert "float32x32" in text


def _library() -> tuple:
    from tvm import te, tirx

    return (te.exp, te.tanh, tirx.exp, tirx.tanh)


def _calls(func, name: str) -> int:
    return func.script().count(f"T.{name}(")


def test_tasks_get_a_fast_form_only_for_float32_transcendentals(target):
    library = _library()
    path = os.path.join(ROOT, "examples", "softmax.py")
    (soft32,) = autosched.load_tasks(path, ["softmax"], ["M=8", "N=16"])
    (soft64,) = autosched.load_tasks(path, ["softmax"], ["M=8", "N=16", "dtype=float64"])
    (norm,) = autosched.load_tasks(path, ["layer_norm"], ["M=8", "N=16"])
    matmul = small_task("matmul")
    fast = fast_math_form(soft32.func)
    assert _calls(soft32.func, "exp") == 1 and _calls(fast, "exp") == 0
    assert fast_math_form(soft64.func) is None and fast_math_form(matmul.func) is None
    assert _calls(norm.func, "rsqrt") == 1 and _calls(fast_math_form(norm.func), "rsqrt") == 0
    gelu = small_task("dense_gelu").func                                     # tanh
    assert _calls(gelu, "tanh") == 1 and _calls(fast_math_form(gelu), "tanh") == 0
    # the fast form is a decision of the space: the task, its key and its reference
    # stay exact, and only a task with a fast form gets the decision
    assert "tirx.exp" in soft32.canonical and _calls(soft32.func, "exp") == 1
    spaces = {t: SearchSpace(t, target, _Rules(_Recording())) for t in (soft32, matmul)}
    specs = {t: spaces[t].decision_specs(spaces[t].sample(random.Random(0))[0])
             for t in spaces}
    assert specs[soft32] == {"fast_math": ChoiceDecision((False, True))}
    assert specs[matmul] == {}
    assert _library() == library


def _softmax_func(exp):
    """The softmax of examples/softmax.py (8 x 16) written with `exp`."""
    from tvm import te

    x = te.placeholder((8, 16), name="x")
    k1 = te.reduce_axis((0, 16), name="k1")
    row_max = te.compute((8,), lambda i: te.max(x[i, k1], axis=k1), name="row_max")
    e = te.compute((8, 16), lambda i, j: exp(x[i, j] - row_max[i]), name="exp")
    k2 = te.reduce_axis((0, 16), name="k2")
    row_sum = te.compute((8,), lambda i: te.sum(e[i, k2], axis=k2), name="row_sum")
    y = te.compute((8, 16), lambda i, j: e[i, j] / row_sum[i], name="softmax")
    return te.create_prim_func([x, y]).with_attr("global_symbol", "main")


def test_the_rewrite_is_the_computation_written_with_the_fast_forms():
    import tvm_ffi
    from tvm import te

    assert tvm_ffi.structural_equal(fast_math_form(_softmax_func(te.exp)),
                                    _softmax_func(fast_exp))
    assert tvm_ffi.structural_equal(fast_math_form(_softmax_func(te.tanh)),
                                    _softmax_func(fast_tanh))


def _loads_of_the_input(fn) -> int:
    """BufferLoads of the input in the fast form of y[i] = fn(x[i] * 2), counted as a
    tree (a node reached twice counts twice, as TVM's passes expand it)."""
    from tvm import te

    from search_space.cpu.tir_build import is_load
    from search_space.tir import iter_nodes

    x = te.placeholder((8,), name="x")
    y = te.compute((8,), lambda i: fn(x[i] * te.const(2.0, "float32")), name="y")
    fast = fast_math_form(te.create_prim_func([x, y]))
    return sum(1 for n in iter_nodes(fast.body)
               if is_load(n) and n.source.name == "x")


def _user_expression(name: str, v):
    from tvm import te

    if name == "exp_of_tanh":
        return te.exp(te.tanh(v))
    if name == "shared_exp":                      # one exp node used twice
        e = te.exp(v)
        return e / (e + te.const(1.0, "float32"))
    return getattr(te, name)(v)


@pytest.mark.parametrize("name, calls", [("exp", 1), ("tanh", 1), ("exp_of_tanh", 1),
                                         ("shared_exp", 2)])
def test_a_fast_form_holds_its_argument_once_per_call(name, calls):
    # A value used several times is bound once; written as a tree, one tanh held
    # ~400 copies of its argument and a GELU store took seconds of TIR passes
    assert _loads_of_the_input(lambda v: _user_expression(name, v)) == calls


class _Recording(Sketch):
    """Schedules nothing; records the library functions while it is applied."""

    name = "record"
    math_variants = True

    def __init__(self):
        self.seen: list[tuple] = []

    def apply(self, sch, decide) -> None:
        self.seen.append(_library())


class _Rules:
    def __init__(self, sketch):
        self.sketch = sketch

    def sketches(self, task, target):
        return [self.sketch]

    def check(self, mod, target):
        return None


def test_the_library_exp_and_tanh_are_untouched_during_and_after(target):
    """The workload is built once, with the library functions; the fast form is
    scheduled with them in place, and they are the same afterwards."""
    from tvm import te

    library = _library()
    built = []

    def gelu_exp(M=8, N=16):
        built.append(_library())
        x = te.placeholder((M, N), name="x")
        y = te.compute((M, N), lambda i, j: te.exp(te.tanh(x[i, j])), name="y")
        return x, y

    task = make_task(WorkloadDef("gelu_exp", gelu_exp, {"M": 8, "N": 16}), {"M": 8, "N": 16})
    sketch = _Recording()
    space = SearchSpace(task, target, _Rules(sketch))
    mod = space.apply(Candidate.make("record", {"fast_math": True}))
    assert _calls(mod["main"], "exp") == _calls(mod["main"], "tanh") == 0
    assert _calls(task.func, "exp") == _calls(task.func, "tanh") == 1
    assert built == [library]
    assert sketch.seen == [library]
    assert _library() == library
    x = np.linspace(-5, 5, 128, dtype=np.float32).reshape(8, 16)
    got = run_module(mod, target, [x], task.outputs[-1])
    np.testing.assert_allclose(got, np.exp(np.tanh(x)), rtol=2e-6)


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
