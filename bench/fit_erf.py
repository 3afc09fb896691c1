"""Fit the rational erf of search_space/fast_math.py and measure it as float32 arithmetic.

    python bench/fit_erf.py [--p 6] [--q 5]

erf(x) ~ x P(s) / Q(s), s = x^2, Q(0) = 1, on [0, 4] for relative error: the linearised
problem x P(s) - erf(x) Q(s) = 0 is solved by weighted least squares, each iteration
divided by the previous Q (Loeb) and reweighted by the previous error (Lawson), which
moves the fit towards minimax. Prints the float64 fit's error, the coefficients rounded
to float32, and the error of the form evaluated in float32 (Horner, one division) over
every 61st positive float32 bit pattern below the clamp; the compiled kernel's error is
what tests/space_cpu/test_fast_math_forms.py checks.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np
from scipy.special import erf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import provenance  # noqa: E402

CLAMP = 4.0


def fit(degree_p: int, degree_q: int, iterations: int = 60):
    """(P, Q) coefficients, lowest first, and the float64 fit's max relative error."""
    x = np.concatenate([np.geomspace(1e-8, 1e-4, 200), np.linspace(1e-4, CLAMP, 20000)])
    s, want = x * x, erf(x)
    columns = [x * s ** i for i in range(degree_p + 1)]
    columns += [-want * s ** j for j in range(1, degree_q + 1)]
    a = np.stack(columns, 1)
    weight, previous_q = np.ones_like(x), np.ones_like(x)
    for _ in range(iterations):
        scale = weight / (want * previous_q)
        c, *_ = np.linalg.lstsq(a * scale[:, None], want * scale, rcond=None)
        p, q = c[:degree_p + 1], np.concatenate([[1.0], c[degree_p + 1:]])
        previous_q = np.polyval(q[::-1], s)
        error = np.abs(x * np.polyval(p[::-1], s) / previous_q - want) / want
        weight = weight * np.sqrt(error / error.max()) + 1e-12
        weight /= weight.max()
    return p, q, float(error.max())


def float32_error(p, q) -> float:
    """Max relative error of the float32 form over normal results below the clamp."""
    bits = np.arange(0, 0x7F800000, 61, dtype=np.uint32)
    x = bits.view(np.float32)
    x = x[(x > 0) & (x < CLAMP)]
    s = x * x
    num, den = np.float32(p[-1]), np.float32(q[-1])
    for c in p[-2::-1]:
        num = num * s + np.float32(c)
    for c in q[-2::-1]:
        den = den * s + np.float32(c)
    got = np.minimum(x * num / den, np.float32(1.0)).astype(np.float64)
    want = erf(x.astype(np.float64))
    normal = want >= np.finfo(np.float32).tiny
    return float((np.abs(got - want) / want)[normal].max())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--p", type=int, default=6, help="degree of P in x^2")
    ap.add_argument("--q", type=int, default=5, help="degree of Q in x^2")
    args = ap.parse_args()
    print(provenance.header(provenance.stamp(seed=None)))
    p, q, err = fit(args.p, args.q)
    p32, q32 = p.astype(np.float32), q.astype(np.float32)
    print(f"float64 fit: max relative error {err:.3g}")
    print("P =", tuple(float(v) for v in p32))
    print("Q =", tuple(float(v) for v in q32))
    print(f"float32 form: max relative error {float32_error(p32, q32):.3g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
