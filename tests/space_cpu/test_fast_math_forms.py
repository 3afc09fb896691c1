"""Vectorisable erf, log, sigmoid, rsqrt and pow: their stated accuracy over a sweep of
float32 bit patterns (tails, subnormals, signed zeros, infinities, NaN) against float64,
the C library's special values, and the rewrite that puts them into a task's fast form
(vector code, no library call)."""
from __future__ import annotations

import re

import numpy as np
import pytest
from scipy.special import erf

from autosched.task import TensorSpec
from search_space.fast_math import (fast_erf, fast_log, fast_math_form, fast_pow,
                                    fast_rsqrt, fast_sigmoid)

from support.cpu_cases import run_module
from support.vector_lowering import has_scalar_loop, vectorised_text

FLT_MIN = 1.1754943508222875e-38
SUBNORMAL_ULP = 2.0 ** -149


def _sweep(step: int = 4099) -> np.ndarray:
    """Every `step`-th float32 bit pattern from +0 to +inf, both signs, and NaN; then a
    few values of the tails and edges, padded to whole vectors of 16."""
    bits = np.arange(0, 0x7F800001, step, dtype=np.int64).astype(np.uint32)
    pos = np.concatenate([bits.view(np.float32),
                          np.array([np.inf, 1.0, 0.9, 0.8999999, 3.9, 4.0, 4.1, 1e-45,
                                    FLT_MIN, 88.7, 87.0, 86.9, 103.0], np.float32)])
    x = np.concatenate([pos, -pos, np.array([np.nan], np.float32)])
    return np.concatenate([x, np.zeros((-len(x)) % 16, np.float32)])


def _apply(fn, target, *xs: np.ndarray) -> np.ndarray:
    """fn over float32 vectors in a loop vectorised 16 wide."""
    import tvm
    from tvm import te

    n = len(xs[0])
    ins = [te.placeholder((n,), name=f"a{k}") for k in range(len(xs))]
    out = te.compute((n,), lambda i: fn(*[a[i] for a in ins]), name="b")
    sch = tvm.s_tir.Schedule(te.create_prim_func([*ins, out]))
    (loop,) = sch.get_loops(sch.get_sblock("b"))
    sch.vectorize(sch.split(loop, [None, 16])[1])
    return run_module(sch.mod, target, list(xs), TensorSpec("b", (n,), "float32"))


def _max_rel(got: np.ndarray, want: np.ndarray, where: np.ndarray) -> float:
    g, w = got[where].astype(np.float64), want[where]
    return float(np.max(np.abs(g - w) / np.abs(w)))


def _same_specials(got, want, where) -> None:
    """NaN where float64 is NaN, the same infinities and exact zeros (with their sign)."""
    g, w = got[where], want[where].astype(np.float32)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    np.testing.assert_array_equal(g[~np.isnan(w)], w[~np.isnan(w)])
    np.testing.assert_array_equal(np.signbit(g[w == 0]), np.signbit(w[w == 0]))


def test_fast_erf_error_and_special_values(target):
    x = _sweep()
    got = _apply(fast_erf, target, x)
    with np.errstate(all="ignore"):
        want = erf(x.astype(np.float64))
    normal = np.abs(want) >= FLT_MIN
    assert _max_rel(got, want, normal) <= 3.5e-7
    # a subnormal result is within one unit of its last place
    assert np.abs(got[~normal & ~np.isnan(x)] - want[~normal & ~np.isnan(x)]).max() <= SUBNORMAL_ULP
    _same_specials(got, want, np.isinf(x) | np.isnan(x) | (x == 0))
    assert got[x == np.float32(4.1)][0] == 1.0 and got[x == np.float32(-4.1)][0] == -1.0


def test_fast_log_error_and_special_values(target):
    x = _sweep()
    got = _apply(fast_log, target, x)
    with np.errstate(all="ignore"):
        want = np.log(x.astype(np.float64))
    finite = np.isfinite(want) & (want != 0)
    assert _max_rel(got, want, finite) <= 2e-7
    assert _max_rel(got, want, finite & (x < FLT_MIN)) <= 2e-7          # subnormal inputs
    _same_specials(got, want, ~finite)               # 0, -0 -> -inf; < 0, NaN -> NaN; 1 -> 0
    assert got[x == 1.0][0] == 0.0 and np.isneginf(got[x == 0]).all()


def test_fast_sigmoid_error_and_special_values(target):
    x = _sweep()
    got = _apply(fast_sigmoid, target, x)
    with np.errstate(all="ignore"):
        want = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    normal = want >= FLT_MIN
    assert _max_rel(got, want, normal) <= 2e-7
    tail = ~normal & ~np.isnan(x)              # x below -87.3: 0 or a subnormal
    assert np.abs(got[tail] - want[tail]).max() <= 3e-39
    _same_specials(got, want, np.isinf(x) | np.isnan(x))


def test_fast_rsqrt_is_one_over_sqrt_exactly(target):
    x = _sweep()
    got = _apply(fast_rsqrt, target, x)
    with np.errstate(all="ignore"):
        want = np.float32(1.0) / np.sqrt(x)
    np.testing.assert_array_equal(got, want)


def _pow_inputs(n: int = 20_000) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = np.exp(rng.uniform(-20, 20, n))
    x[: n // 4] *= -1
    y = rng.uniform(-6, 6, n)
    y[n // 4: n // 2] = np.round(y[n // 4: n // 2])
    return x.astype(np.float32), y.astype(np.float32)


# (x, y, C99's x^y): zeros, ones, infinities, NaN and negative bases
POW_SPECIALS = [(0.0, 2.0, 0.0), (-0.0, 3.0, -0.0), (-0.0, 2.0, 0.0), (-0.0, -3.0, -np.inf),
                (0.0, -1.0, np.inf), (0.0, 0.0, 1.0), (np.nan, 0.0, 1.0), (1.0, np.nan, 1.0),
                (1.0, np.inf, 1.0), (-1.0, np.inf, 1.0), (-1.0, np.nan, np.nan),
                (np.nan, 1.0, np.nan), (-2.0, 3.0, -8.0), (-2.0, 2.0, 4.0),
                (-2.0, 0.5, np.nan), (-8.0, 1 / 3, np.nan), (np.inf, 2.0, np.inf),
                (np.inf, -2.0, 0.0), (-np.inf, 3.0, -np.inf), (-np.inf, -3.0, -0.0),
                (-np.inf, 0.5, np.inf), (-0.0, 0.5, 0.0), (2.0, np.inf, np.inf),
                (0.5, np.inf, 0.0), (2.0, -np.inf, 0.0), (0.5, -np.inf, np.inf),
                (3.0, 0.0, 1.0), (2.0, 200.0, np.inf), (2.0, -200.0, 0.0)]


def test_fast_pow_error_grows_with_y_log_x_and_special_values(target):
    x, y = _pow_inputs()
    sx, sy, want_s = (np.array(c, np.float32) for c in zip(*POW_SPECIALS))
    pad = (-(len(x) + len(sx))) % 16
    xs = np.concatenate([x, sx, np.ones(pad, np.float32)])
    ys = np.concatenate([y, sy, np.ones(pad, np.float32)])
    got = _apply(fast_pow, target, xs, ys)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    with np.errstate(invalid="ignore"):
        want = np.power(x64, y64)
    ok = (np.abs(want) >= 1.8e-38) & (np.abs(want) <= 3.4e38)     # fast_exp's range
    scale = 1.0 + np.abs(y64 * np.log(np.abs(x64)))
    assert np.max(np.abs(got[: len(x)][ok] - want[ok]) / np.abs(want[ok]) / scale[ok]) <= 2e-7
    special = got[len(x): len(x) + len(sx)]
    np.testing.assert_array_equal(special, want_s)
    np.testing.assert_array_equal(np.signbit(special), np.signbit(want_s))


@pytest.mark.parametrize("power, bound", [(2.0, 1.2e-7), (3.0, 2.5e-7), (-1.0, 1.2e-7),
                                          (7.0, 6e-7), (-8.0, 8e-7), (0.5, 6e-8),
                                          (-0.5, 1.2e-7), (2.5, 2e-7)])
def test_fast_pow_of_a_constant_exponent(power, bound, target):
    from tvm import tirx

    x = np.abs(_pow_inputs()[0])
    got = _apply(lambda v: fast_pow(v, tirx.const(power, "float32")), target, x)
    want = np.power(x.astype(np.float64), power)
    ok = (want >= 1.8e-38) & (want <= 3.4e38)
    scale = 1.0 + np.abs(power * np.log(x.astype(np.float64)))
    assert np.max(np.abs(got[ok] - want[ok]) / want[ok] / scale[ok]) <= bound


def _library(op: str):
    from tvm import te

    return {"erf": te.erf, "log": te.log, "sigmoid": te.sigmoid, "rsqrt": te.rsqrt,
            "pow": lambda v: te.power(v, v + te.const(1.0, v.dtype)),
            "pow3": lambda v: te.power(v, te.const(3.0, v.dtype))}[op]


@pytest.mark.parametrize("op", ["erf", "log", "sigmoid", "rsqrt", "pow", "pow3"])
def test_the_rewrite_gives_vector_code_without_library_calls(op, target):
    """Each call is replaced in float32 (float64 keeps it); the loop stays vectorised
    (TVM's VectorizeLoop scalarises a whole loop holding `erf` or `rsqrt`, and the C
    library's logf / powf / expf are called once per element) and gives the function."""
    import tvm
    from tvm import s_tir, te

    def func(dtype):
        a = te.placeholder((64, 128), name="a", dtype=dtype)
        b = te.compute((64, 128), lambda i, j: _library(op)(a[i, j]), name="b")
        return te.create_prim_func([a, b])

    assert fast_math_form(func("float64")) is None
    fast = fast_math_form(func("float32"))
    name = {"pow3": "pow"}.get(op, op)
    assert f"T.{name}(" in func("float32").script() and f"T.{name}(" not in fast.script()
    sch = s_tir.Schedule(fast)
    _, j = sch.get_loops(sch.get_sblock("b"))
    sch.vectorize(sch.split(j, [None, 32])[1])
    text = vectorised_text(sch.mod, target)
    assert not has_scalar_loop(text)
    asm = tvm.compile(sch.mod, target=target.tvm()).mod.inspect_source("asm")
    assert not re.search(r"\b(erff|logf|expf|powf|sqrtf)\b", asm)
    x = np.linspace(0.01, 6.0, 64 * 128, dtype=np.float32).reshape(64, 128)
    got = run_module(sch.mod, target, [x], TensorSpec("b", (64, 128), "float32"))
    want = {"erf": erf, "log": np.log, "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
            "rsqrt": lambda v: 1 / np.sqrt(v), "pow": lambda v: v ** (v + 1),
            "pow3": lambda v: v ** 3}[op](x.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=3e-6)


@pytest.mark.parametrize("workload", ["gelu_exact", "gelu_exact_grad"])
def test_exact_gelu_gets_the_decision_on_the_cpu_only(workload, target):
    """CUDA computes erff / expf natively: its spaces never offer the rewrite."""
    import os
    import random

    import autosched
    from autosched.target import resolve_target
    from search_space import generate_space

    from support.cpu_cases import ROOT

    path = os.path.join(ROOT, "examples", "nn_ops.py")
    (task,) = autosched.load_tasks(path, [workload], ["M=8", "N=32"])
    rng = random.Random(0)
    cpu = generate_space(task, target)
    cuda = generate_space(task, resolve_target("cuda"))
    assert any("fast_math" in cpu.sample(rng)[0].values() for _ in range(8))
    assert not any("fast_math" in cuda.sample(rng)[0].values() for _ in range(8))


def test_a_fast_exact_gelu_gradient_matches_float64(target):
    """The rewrite inside a scheduled candidate: dx = dy (Phi(x) + x phi(x)) over the
    whole range of erf, against float64. Phi(x) = (1 + erf(x / sqrt 2)) / 2 inherits
    erf's absolute error near -1 (3.5e-7 at most), which is the whole value for very
    negative x: hence an absolute tolerance of that size (torch's own float32
    gelu_backward is no closer to float64 there)."""
    import math
    import os

    import autosched
    from search_space import Candidate, generate_space

    from support.cpu_cases import ROOT

    path = os.path.join(ROOT, "examples", "nn_ops.py")
    (task,) = autosched.load_tasks(path, ["gelu_exact_grad"], ["M=8", "N=64"])
    cand = Candidate.make("rows", {"fast_math": True, "dx.unroll": 0, "dx.vector": 16})
    mod = generate_space(task, target).apply(cand)
    x = np.linspace(-7, 7, 8 * 64, dtype=np.float32).reshape(8, 64)
    dy = np.full((8, 64), 1.5, np.float32)
    got = run_module(mod, target, [dy, x], task.outputs[-1])
    v = x.astype(np.float64)
    want = 1.5 * (0.5 * (1 + erf(v / math.sqrt(2))) + v * np.exp(-v * v / 2) / math.sqrt(2 * math.pi))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1.5 * 3.5e-7 / 2)


@pytest.mark.parametrize("dtype, offered", [("float32", True), ("float16", True),
                                            ("bfloat16", False)])
def test_bfloat16_computations_are_not_offered_fast_math(dtype, offered, target):
    """A bfloat16 GELU computes erf in float32, but TVM's VectorizeLoop cannot build the
    forms' Let bindings beside bfloat16 conversions: the decision would only waste trials."""
    import random

    from autosched.model.workloads import WORKLOADS
    from autosched.workload import make_task
    from search_space import generate_space

    task = make_task(WORKLOADS["aten_gelu"].definition(), {"M": 8, "N": 32, "dtype": dtype})
    rng = random.Random(0)
    space = generate_space(task, target)
    seen = any("fast_math" in space.sample(rng)[0].values() for _ in range(8))
    assert seen is offered
