"""Vectorisable float32 exp and tanh, and the task variant that uses them.

On the CPU, TVM lowers `exp` (and `tanh`, through exp) to calls of the C library's
scalar `expf`, one element at a time, even inside a vectorised loop: softmax spends most
of its time there. The expressions here use only arithmetic, `floor`, comparisons and a bit
reinterpretation, so a vectorised loop stays vectorised:

* exp(x) = 2^k * p(r), k = round(x / ln 2), r = x - k ln 2 (ln 2 in two parts, so r is
  exact), |r| <= ln(2)/2 and p the degree-7 Taylor polynomial of e^r (remainder below
  6e-9). 2^k is built in the exponent bits. Below -86.6 the result is 0 (the true value
  is under 2.4e-38), above ln(FLT_MAX) = 88.7228 it is +inf, NaN stays NaN. Relative
  error in between: 7.5e-8 measured, 2e-7 tested (the C library's expf: 6e-8).
* tanh(x) = x - x^3/3 + 2x^5/15 - 17x^7/315 + 62x^9/2835 for |x| < 0.3, else
  sign(x) (1 - 2 / (1 + exp(2|x|))): relative error 2.5e-7 measured, 1e-6 tested.

`math_variant(build)` builds a task's computation again with these in place of `te.exp`
and `te.tanh` (workloads call them through the `tvm.te` / `tvm.tirx` modules), so the
search can choose it as a schedule decision while the task (its key and reference)
stays the exact computation. Other dtypes keep the library functions.
"""
from __future__ import annotations

import contextlib
import math

_LOG2E = 1.4426950408889634
_LN2_HI = 0.693145751953125            # 11 significant bits: k * _LN2_HI is exact
_LN2_LO = 1.4286068203094172e-06       # ln 2 - _LN2_HI
_EXP_LO, _EXP_HI = -86.6, 88.72283     # 2^(k-1) stays a normal float in between
_TANH_SMALL = 0.3
_TANH_SERIES = (1.0, -1.0 / 3, 2.0 / 15, -17.0 / 315, 62.0 / 2835)


def _is_f32(x) -> bool:
    from .canonical import expr_dtype

    return expr_dtype(x) == "float32"


def _f32(v):
    """A float32 constant."""
    from tvm import tirx

    return tirx.const(v, "float32")


def fast_exp(x):
    """e^x for a float32 expression, as vectorisable arithmetic."""
    from tvm import tirx

    xc = tirx.max(tirx.min(x, _f32(_EXP_HI)), _f32(_EXP_LO))
    k = tirx.floor(xc * _f32(_LOG2E) + _f32(0.5))
    r = xc - k * _f32(_LN2_HI) - k * _f32(_LN2_LO)
    p = _f32(1.0 / math.factorial(7))
    for n in range(6, -1, -1):
        p = p * r + _f32(1.0 / math.factorial(n))
    bits = (k.astype("int32") + tirx.const(126, "int32")) << tirx.const(23, "int32")
    scaled = p * tirx.reinterpret("float32", bits) * _f32(2.0)    # 2^k = 2^(k-1) * 2
    out = tirx.Select(x < _f32(_EXP_LO), _f32(0.0), scaled)
    out = tirx.Select(x > _f32(_EXP_HI), _f32(math.inf), out)
    return tirx.Select(tirx.isnan(x), x, out)                      # NaN in, NaN out


def fast_tanh(x):
    """tanh(x) for a float32 expression, as vectorisable arithmetic."""
    from tvm import tirx

    ax = tirx.abs(x)
    x2 = x * x
    series = _f32(_TANH_SERIES[-1])
    for coef in reversed(_TANH_SERIES[:-1]):
        series = series * x2 + _f32(coef)
    small = x * series
    e2x = fast_exp(_f32(2.0) * tirx.min(ax, _f32(20.0)))
    large = _f32(1.0) - _f32(2.0) / (_f32(1.0) + e2x)
    signed = tirx.Select(x < _f32(0.0), -large, large)
    out = tirx.Select(ax < _f32(_TANH_SMALL), small, signed)
    return tirx.Select(tirx.isnan(x), x, out)


@contextlib.contextmanager
def _fast_calls():
    """`te.exp` / `te.tanh` (and their tvm.tirx twins) build the fast forms for float32
    arguments while the block runs."""
    import tvm
    from tvm import te, tirx

    saved = {(mod, name): getattr(mod, name) for mod in (te, tirx) for name in ("exp", "tanh")}
    fast = {"exp": fast_exp, "tanh": fast_tanh}

    def wrap(name):
        library = saved[(tirx, name)]

        def call(x, *args, **kwargs):
            x = tvm.runtime.convert(x) if isinstance(x, (int, float)) else x
            return fast[name](x) if _is_f32(x) and not args and not kwargs else \
                library(x, *args, **kwargs)
        return call

    try:
        for mod, name in saved:
            setattr(mod, name, wrap(name))
        yield
    finally:
        for (mod, name), fn in saved.items():
            setattr(mod, name, fn)


def math_variant(build):
    """`build()` run with the fast forms in place of `te.exp` / `te.tanh` (a workload
    that reaches exp otherwise builds the same computation as without)."""
    with _fast_calls():
        return build()
