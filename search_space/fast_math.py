"""Vectorisable float32 exp and tanh, and the rewrite that puts them into a computation.

On the CPU, TVM lowers `exp` (and `tanh`, through exp) to calls of the C library's
scalar `expf`, one element at a time, even inside a vectorised loop: softmax spends most
of its time there. The expressions here use only arithmetic, `floor`, comparisons and a bit
reinterpretation, so a vectorised loop stays vectorised:

* exp(x) = 2^k * p(r), k = round(x / ln 2), r = x - k ln 2 (ln 2 in two parts, so r is
  exact), |r| <= ln(2)/2 and p the degree-7 Taylor polynomial of e^r (remainder below
  6e-9). 2^k is built in the exponent bits. x is first clamped to [-87, 89], and the
  ends of that range need no test of their own: at -87 the exponent field is 0, so the
  result is exactly 0 (for every x below -86.99, where the true value is under 1.8e-38);
  at 89 the product overflows to +inf (as it does for every x above ln(FLT_MAX) =
  88.7228). The clamps keep a NaN, and NaN in is NaN out. 17 vector instructions on
  AVX-512, no compare or blend. Relative error in between: 7.5e-8 measured, 2e-7
  tested (the C library's expf: 6e-8).
* tanh(x) = x - x^3/3 + 2x^5/15 - 17x^7/315 + 62x^9/2835 for |x| < 0.3, else
  sign(x) (1 - 2 / (1 + exp(2|x|))): relative error 2.5e-7 measured, 1e-6 tested.

`fast_math_form(func)` rewrites a task's PrimFunc, replacing every call of `exp` and
`tanh` on a float32 argument with these forms, so the search can choose it as a
schedule decision (`fast_math`) while the task (its key and reference) stays the exact
computation. Other dtypes keep the library functions. Nothing outside the function is
touched: `te.exp`, `tirx.exp` and the rest stay what they are.

Every value a form uses more than once (its argument, the clamped x, k, r, |x|) is bound
once by a TIR `Let`. Written as a tree instead, one tanh holds about 400 copies of its
argument, a GELU epilogue's store grows to ~60K characters, UnrollLoop copies it per
unrolled element, and TVM's TIR passes then spent seconds per candidate on it (11 s a
trial for dense + bias + GELU). A Let's body uses the variable, so no Let node is
ever duplicated by a form; a call occurring twice is rewritten once per occurrence,
each with its own variables.
"""
from __future__ import annotations

import math

from .tir import expr_dtype

_LOG2E = 1.4426950408889634
_LN2_HI = 0.693145751953125            # 11 significant bits: k * _LN2_HI is exact
_LN2_LO = 1.4286068203094172e-06       # ln 2 - _LN2_HI
_EXP_LO, _EXP_HI = -87.0, 89.0   # k = -126 (2^(k-1) has exponent field 0), k = 128 (overflows)
_TANH_SMALL = 0.3
_TANH_SERIES = (1.0, -1.0 / 3, 2.0 / 15, -17.0 / 315, 62.0 / 2835)


def _f32(v):
    """A float32 constant."""
    from tvm import tirx

    return tirx.const(v, "float32")


def _at_most(x, hi: float):
    """min(x, hi) with a NaN kept: the bound is taken only when `hi < x` holds, and
    every comparison with NaN fails (one vector min on x86)."""
    from tvm import tirx

    return tirx.Select(_f32(hi) < x, _f32(hi), x)


def _bound(value, name: str, body):
    """`body(v)` with `v` bound to `value` by a TIR Let: a value used several times is
    one node, not a copy per use (a variable or a constant is used as it is)."""
    from tvm import tirx

    if isinstance(value, (tirx.Var, tirx.FloatImm, tirx.IntImm)):
        return body(value)
    var = tirx.Var(name, expr_dtype(value))
    return tirx.Let(var, value, body(var))


def _clamp(x, lo: float, hi: float, body):
    """`body` of x limited to [lo, hi], a NaN kept (see `_at_most`)."""
    from tvm import tirx

    return _bound(x, "x", lambda x: _bound(
        _at_most(x, hi), "high",
        lambda high: _bound(tirx.Select(high < _f32(lo), _f32(lo), high), "clamped", body)))


def fast_exp(x):
    """e^x for a float32 expression, as vectorisable arithmetic."""
    from tvm import tirx

    def rounded(xc):
        k = tirx.floor(xc * _f32(_LOG2E) + _f32(0.5))
        return _bound(k, "k", lambda k: _bound(
            xc - k * _f32(_LN2_HI) - k * _f32(_LN2_LO), "r", lambda r: _scaled_exp(k, r)))

    return _clamp(x, _EXP_LO, _EXP_HI, rounded)


def _scaled_exp(k, r):
    """2^k e^r for k = round(x / ln 2) and r = x - k ln 2."""
    from tvm import tirx

    # p = 2 e^r: the coefficients carry the factor 2 of 2^k = 2^(k-1) * 2 (exact)
    p = _f32(2.0 / math.factorial(7))
    for n in range(6, -1, -1):
        p = p * r + _f32(2.0 / math.factorial(n))
    bits = (k.astype("int32") + tirx.const(126, "int32")) << tirx.const(23, "int32")
    return p * tirx.reinterpret("float32", bits)


def fast_tanh(x):
    """tanh(x) for a float32 expression, as vectorisable arithmetic."""
    from tvm import tirx

    return _bound(x, "x", lambda x: _bound(tirx.abs(x), "ax", lambda ax: _tanh(x, ax)))


def _tanh(x, ax):
    """tanh of the variable x, whose absolute value is the variable ax."""
    from tvm import tirx

    x2 = x * x
    series = _f32(_TANH_SERIES[-1])
    for coef in reversed(_TANH_SERIES[:-1]):
        series = series * x2 + _f32(coef)
    small = x * series
    # A NaN flows through every step: the bound and `fast_exp` keep it, and both
    # selects then take their second arm (no `isnan`: TVM cannot vectorise that call,
    # and a loop holding one is scalarised whole)
    e2x = fast_exp(_f32(2.0) * _at_most(ax, 20.0))
    signed = _bound(_f32(1.0) - _f32(2.0) / (_f32(1.0) + e2x), "large",
                    lambda large: tirx.Select(x < _f32(0.0), -large, large))
    return tirx.Select(ax < _f32(_TANH_SMALL), small, signed)


_FAST_FORMS = {"tirx.exp": fast_exp, "tirx.tanh": fast_tanh}


def fast_math_form(func):
    """`func` (a PrimFunc) with its float32 `exp` / `tanh` calls replaced by `fast_exp` /
    `fast_tanh`, or None when it has none (the fast form would be the same function)."""
    import tvm
    import tvm_ffi

    replaced = []

    def rewrite(call):
        fast = _FAST_FORMS.get(str(call.op.name)) if isinstance(call.op, tvm.ir.Op) else None
        if fast is None or len(call.args) != 1 or expr_dtype(call.args[0]) != "float32":
            return call
        replaced.append(call)
        return fast(call.args[0])

    # post-order: a call's argument is rewritten before the call (exp(tanh(x)))
    fast = tvm_ffi.structural_map(func, ((tvm.ir.Call, rewrite),), order="post")
    return fast if replaced else None
