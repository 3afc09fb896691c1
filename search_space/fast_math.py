"""Vectorisable float32 transcendental functions, and the rewrite that puts them into a
computation.

On the CPU, TVM lowers `exp`, `tanh`, `log`, `sigmoid` (as 1 / (1 + exp(-x))) and `pow` to
calls of the C library's scalar `expf` / `logf` / `powf`, one element at a time, even
inside a vectorised loop, and its VectorizeLoop scalarises a whole loop that holds `erf`
or `rsqrt`: softmax, exact GELU and its gradient spend most of their time there (`sqrt`
and `fabs` have vector instructions and need nothing). The expressions here use only
arithmetic, `floor`, min / max, comparisons and bit reinterpretation, so a vectorised
loop stays vectorised. Errors are relative, against float64, over every 61st float32 bit
pattern of both signs (tests/space_cpu/test_fast_math*.py test the bounds):

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
* erf(x) = x P(x^2) / Q(x^2) on x clamped to [-4, 4] (erf rounds to 1 from 3.92), one
  rational form for every x (a branch would have its two arms both computed in a
  vector: the form it replaced, a series below 0.9 and 1 - e^R(|x|) above, cost twice
  the instructions): 3.1e-7 measured over every 61st bit pattern, 3.5e-7 tested; a
  subnormal result within one unit of its last place.
* log(x) = k ln 2 + log(1 + f), x = 2^k (1 + f) with 1 + f in [sqrt(1/2), sqrt(2)) read
  from the bits (a subnormal x scaled by 2^23 first), log(1 + f) = f - f^2/2 + f^3 P(f):
  1.3e-7 measured, 2e-7 tested; 0 -> -inf, +inf -> +inf, x < 0 or NaN -> NaN.
* sigmoid(x) = 1 / (1 + exp(-x)) with the exp above: 1.4e-7 measured, 2e-7
  tested down to results of FLT_MIN (x >= -87.3), 0 or a subnormal below that.
* rsqrt(x) = 1 / sqrt(x), which is what TVM lowers it to: exact, only vectorisable.
* pow(x, y): products for a constant integer exponent up to 8 in magnitude, sqrt for
  +-1/2, else exp(y log|x|) with the sign and the C99 special cases; its error is that
  of log scaled by |y log x|: at most 1.2e-7 (1 + |y ln x|) measured on 400K random
  pairs, 2e-7 (1 + |y ln x|) tested. Not for large |y log x| where the last bits matter.

`fast_math_form(func)` rewrites a task's PrimFunc, replacing every call of these
functions on float32 arguments with these forms, so the search can choose it as a
schedule decision (`fast_math`) while the task (its key and reference) stays the exact
computation. Other dtypes keep the library functions. Nothing outside the function is
touched: `te.exp`, `tirx.exp` and the rest stay what they are. A sketch offers the decision
where its target has no fast native form (`Sketch.math_variants`): the CPU's do, while
CUDA's keep erff / logf / expf / powf / rsqrtf, which the device computes natively.

Every value a form uses more than once (its argument, the clamped x, k, r, |x|) is bound
once by a TIR `Let`. Written as a tree instead, one tanh holds about 400 copies of its
argument, a GELU epilogue's store grows to ~60K characters, UnrollLoop copies it per
unrolled element, and TVM's TIR passes then spent seconds per candidate on it (11 s a
trial for dense + bias + GELU). A Let's body uses the variable, so no Let node is
ever duplicated by a form; a call occurring twice is rewritten once per occurrence,
each with its own variables. Clamps are min / max, not Select (see `_at_most`).
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
    """min(x, hi) with a NaN kept: TVM's `min(a, b)` is `a < b ? a : b`, and every
    comparison with NaN fails, so a NaN x is taken (one vector min on x86). A `min`,
    not a `Select`: TVM's passes simplify a Select's arms under its condition, and
    with Let values substituted that costs time exponential in the depth of Selects
    nested through Lets (eight such levels took minutes to build)."""
    from tvm import tirx

    return tirx.min(_f32(hi), x)


def _at_least(x, lo: float):
    """max(x, lo) with a NaN kept (see `_at_most`)."""
    from tvm import tirx

    return tirx.max(_f32(lo), x)


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
    return _bound(x, "x", lambda x: _bound(
        _at_most(x, hi), "high", lambda high: _bound(_at_least(high, lo), "clamped", body)))


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


# erf(x) = x P(x^2) / Q(x^2), one rational form over the whole range (no branch whose two
# arms a vector would both compute): P of degree 6 and Q of degree 5 in x^2, fitted for
# relative error on [0, 4] (bench/fit_erf.py: linearised least squares, Loeb's
# reweighting by the previous Q, Lawson's weights towards minimax; rounded to float32)
_ERF_CLAMP = 4.0
_ERF_P = (1.128379225730896, 0.18520310521125793, 0.0543166920542717,
          0.0038495808839797974, 0.0003796000382862985, 4.684544364863541e-06,
          -1.3201022497355552e-08)
_ERF_Q = (1.0, 0.4974654018878937, 0.11395818740129471, 0.0154619961977005,
          0.001307551865465939, 6.310836761258543e-05)
# log(1 + f) = f - f^2 / 2 + f^3 P(f) for f in [sqrt(1/2) - 1, sqrt(2) - 1]
_LOG_SERIES = (0.3333333134651184, -0.250008225440979, 0.20001226663589478,
               -0.16623355448246002, 0.14201761782169342, -0.13160200417041779,
               0.12761564552783966, -0.07634430378675461)
_SQRT_HALF_BITS = 0x3F3504F3           # float32 sqrt(1/2)
_FLT_MIN_BITS = 0x00800000             # float32 FLT_MIN, the smallest normal number
_POW_MULTIPLY = 8                      # x^n for a constant integer |n| <= 8: products


def _poly(coefs, v):
    """coefs[0] + coefs[1] v + ... by Horner's rule."""
    p = _f32(coefs[-1])
    for c in reversed(coefs[:-1]):
        p = p * v + _f32(c)
    return p


def fast_erf(x):
    """erf(x) for a float32 expression, as vectorisable arithmetic."""
    from tvm import tirx

    def erf(xc):
        ratio = _bound(xc * xc, "s", lambda s: xc * _poly(_ERF_P, s) / _poly(_ERF_Q, s))
        # |erf| <= 1 where the float32 ratio would round past it; from the clamp on (and
        # for a NaN, which fails the test) x / 4, which is exactly +-1 there
        return tirx.Select(tirx.abs(xc) < _f32(_ERF_CLAMP),
                           _at_least(_at_most(ratio, 1.0), -1.0),
                           xc * _f32(1.0 / _ERF_CLAMP))

    return _clamp(x, -_ERF_CLAMP, _ERF_CLAMP, erf)


def fast_log(x):
    """The natural logarithm of a float32 expression, as vectorisable arithmetic."""
    return _bound(x, "x", _log)


def _log(x):
    """log of the variable x: x = 2^k m with m in [sqrt(1/2), sqrt(2)), read from the
    bits (a subnormal x is first scaled by 2^23), then k ln 2 + log(1 + f), f = m - 1
    exact; 0 -> -inf, +inf -> +inf, negative or NaN -> NaN."""
    from tvm import tirx

    i32 = lambda v: tirx.const(v, "int32")  # noqa: E731
    # 1 for a subnormal x (bits below those of FLT_MIN), else 0, as a number: a Select,
    # or a cast of a comparison, fails in TVM's passes here (see `_at_most`)
    def from_raw(raw):
        tiny = i32(0) - ((raw - i32(_FLT_MIN_BITS)) >> i32(31))
        return _bound(tiny, "tiny", lambda tiny: _bound(tirx.reinterpret(
            "int32", x * tirx.reinterpret("float32", (i32(127) + i32(23) * tiny) << i32(23))),
            "bits", lambda bits: from_bits(bits, tiny)))

    def from_bits(bits, tiny):
        return _bound((bits - i32(_SQRT_HALF_BITS)) >> i32(23), "k", lambda k: _bound(
            tirx.reinterpret("float32", bits - (k << i32(23))) - _f32(1.0), "f",
            lambda f: _bound((k - i32(23) * tiny).astype("float32"), "kf",
                             lambda kf: _log_parts(kf, f))))

    finite = _bound(tirx.reinterpret("int32", x), "raw", from_raw)
    special = tirx.Select(x == _f32(0.0), _f32(-math.inf), _f32(math.nan))
    return tirx.Select(_f32(0.0) < x, tirx.Select(x < _f32(math.inf), finite, x), special)


def _log_parts(kf, f):
    """k ln 2 + log(1 + f), ln 2 in two parts (k ln2_hi is exact)."""
    return _bound(f * f, "f2", lambda f2: kf * _f32(_LN2_HI) + (
        kf * _f32(_LN2_LO) + (f - _f32(0.5) * f2 + f2 * f * _poly(_LOG_SERIES, f))))


def fast_sigmoid(x):
    """1 / (1 + e^-x) for a float32 expression (how TVM lowers sigmoid), with `fast_exp`."""
    return _f32(1.0) / (_f32(1.0) + fast_exp(-x))


def fast_rsqrt(x):
    """1 / sqrt(x): what TVM lowers rsqrt to, written so that a loop holding it is
    vectorised (TVM's VectorizeLoop scalarises a loop with an `rsqrt` call; `sqrt`
    and division have vector instructions). Exact: the same arithmetic."""
    from tvm import tirx

    return _f32(1.0) / tirx.sqrt(x)


def fast_pow(x, y):
    """x^y for float32 expressions: products for a constant integer exponent up to 8
    in magnitude, `sqrt` for a constant +-1/2, else exp(y log|x|) with `fast_exp` and
    `fast_log`, its sign from x and y, and the C library's special cases (x^0 = 1^y = 1,
    NaN included; (-1)^inf = 1; a finite negative x to a non-integer power is NaN;
    signed zeros and infinities as C99 says). The relative error of the general form
    grows with |y log x| (the error of log is scaled by it). The +-1/2 forms keep
    sqrt's own values at -0 and -inf (-0 and NaN, where powf gives +0 and +inf)."""
    from tvm import tirx

    if isinstance(y, tirx.FloatImm):
        n = float(y.value)
        if math.isfinite(n) and n == int(n) and abs(n) <= _POW_MULTIPLY:
            return _bound(x, "x", lambda x: _power(x, int(n)))
        if abs(n) == 0.5:
            return tirx.sqrt(x) if n > 0 else fast_rsqrt(x)
    return _bound(x, "x", lambda x: _bound(y, "y", lambda y: _pow(x, y)))


def _power(x, n: int):
    """x^n of the variable x for an integer n by repeated squaring."""
    if n < 0:
        return _f32(1.0) / _power(x, -n)
    if n == 0:
        return _f32(1.0)
    if n == 1:
        return x
    half = _bound(x * x, "sq", lambda sq: _power(sq, n // 2))
    return half * x if n % 2 else half


def _pow(x, y):
    """x^y of the variables x and y (the general form of `fast_pow`)."""
    from tvm import tirx

    zero, one = _f32(0.0), _f32(1.0)
    integer = tirx.floor(y) == y
    odd = tirx.floor(y * _f32(0.5)) != y * _f32(0.5)
    # a set sign bit: -0 and -inf too, whose powers keep the sign for an odd integer
    # and are +0 / +inf for any other y
    signed = tirx.reinterpret("int32", x) < tirx.const(0, "int32")
    finite_negative = tirx.Select(_f32(-math.inf) < x, x < zero, tirx.const(False, "bool"))

    def with_sign(mag):
        other = tirx.Select(finite_negative, _f32(math.nan), mag)
        value = tirx.Select(signed, tirx.Select(integer, tirx.Select(odd, -mag, mag), other),
                            mag)
        # |x| = 1: y log|x| is NaN for an infinite y, and 1^y = (-1)^(+-inf) = 1
        unit = tirx.Select(x == one, one, tirx.Select(
            integer, tirx.Select(odd, -one, one), _f32(math.nan)))
        return tirx.Select(y == zero, one, tirx.Select(tirx.abs(x) == one, unit, value))

    return _bound(fast_exp(y * fast_log(tirx.abs(x))), "mag", with_sign)


_FAST_FORMS = {"tirx.exp": fast_exp, "tirx.tanh": fast_tanh, "tirx.erf": fast_erf,
               "tirx.log": fast_log, "tirx.sigmoid": fast_sigmoid,
               "tirx.rsqrt": fast_rsqrt, "tirx.pow": fast_pow}


def fast_math_form(func):
    """`func` (a PrimFunc) with its float32 calls of the functions in `_FAST_FORMS`
    replaced by their fast forms, or None when it has none (the fast form would be the
    same function)."""
    import tvm
    import tvm_ffi

    replaced = []

    def rewrite(call):
        fast = _FAST_FORMS.get(str(call.op.name)) if isinstance(call.op, tvm.ir.Op) else None
        if fast is None or any(expr_dtype(a) != "float32" for a in call.args):
            return call
        replaced.append(call)
        return fast(*call.args)

    # post-order: a call's argument is rewritten before the call (exp(tanh(x)))
    fast = tvm_ffi.structural_map(func, ((tvm.ir.Call, rewrite),), order="post")
    return fast if replaced else None
