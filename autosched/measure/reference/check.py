"""Is a candidate's output the reference's output? Dtype-aware tolerances.

The rule (one place, used by every runner):

- Integer and boolean outputs must be equal, element for element.
- Floating-point outputs pass when, for every element,
  ``|out - ref| <= tol * scale + tol * |ref|``, where ``scale = max |ref|`` over the
  finite reference values (1 when they are all zero) and

      tol = min(cap, max(floor, 4 * eps * sqrt(R)))

  ``eps`` is the dtype's machine epsilon and ``R`` the longest reduction of the
  computation (the product of the reduction extents of its biggest reducing block;
  1 for elementwise work). A schedule may legally reorder a reduction (split, rfactor,
  vector lanes, FMA contraction); the rounding error of a length-R sum then moves by
  roughly ``eps * sqrt(R)`` of the magnitude of its partial sums, for which ``scale``
  stands in. Measured here on matmuls with K=64 and K=1024: reordering moved outputs by
  0.2-0.35 * eps * sqrt(K) * scale for fp32, fp16 and bf16, so the factor 4 leaves
  a margin of about 10x. ``floor`` absorbs differently vectorised transcendental
  functions on elementwise work; ``cap`` keeps the check meaningful for long low-precision
  reductions (there a wrong answer smaller than the cap can pass: bf16 carries 8 bits).
- A half-precision output (float16, bfloat16) whose longest reduction accumulates in
  float32 (cast in, summed in float32, cast out once, as the model path's kernels and
  torch's compute them) is one final rounding away from any correct order of that sum:
  ``tol = max(float32's tol, 2 half rounding steps)`` (2^-9 for fp16, 2^-6 for bf16),
  where the rule above, made for sums in the half type itself, would let a bf16 answer
  be off by 6% and more.
- NaN must appear exactly where the reference has NaN; infinities must match in place
  and sign. A NaN where the reference has a number is always wrong.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# dtype -> (eps, floor, cap)
FLOAT_RULES = {
    "float64": (2.0 ** -52, 1e-12, 1e-8),
    "float32": (2.0 ** -23, 1e-5, 1e-3),
    "float16": (2.0 ** -10, 1e-2, 5e-2),
    "bfloat16": (2.0 ** -7, 6e-2, 0.25),
}


@dataclass(frozen=True)
class Tolerance:
    """``exact`` for integers; else |out - ref| <= atol + rtol * |ref| elementwise."""

    rtol: float = 0.0
    atol: float = 0.0
    exact: bool = True

    def to_json(self) -> dict:
        return {"rtol": self.rtol, "atol": self.atol, "exact": self.exact}

    @staticmethod
    def from_json(d: dict) -> "Tolerance":
        return Tolerance(float(d["rtol"]), float(d["atol"]), bool(d["exact"]))


# half dtype -> two rounding steps of the dtype relative to a value (2 * 2^-mantissa bits)
HALF_ROUNDING = {"float16": 2.0 ** -9, "bfloat16": 2.0 ** -6}


def relative_tolerance(dtype: str, reduction_extent: int,
                       accumulate: str | None = None) -> float | None:
    """`tol` of the module rule for a float dtype; None for an exact dtype. `accumulate`:
    the dtype the longest reduction sums in (None when unknown)."""
    if dtype in HALF_ROUNDING and accumulate == "float32":
        return max(relative_tolerance("float32", reduction_extent), HALF_ROUNDING[dtype])
    rule = FLOAT_RULES.get(dtype)
    if rule is None:
        if dtype.startswith("float"):  # e.g. float8 variants: treat like bf16, the coarsest
            rule = FLOAT_RULES["bfloat16"]
        else:
            return None
    eps, floor, cap = rule
    return min(cap, max(floor, 4.0 * eps * math.sqrt(max(1, reduction_extent))))


def tolerance_for(dtype: str, reduction_extent: int, reference: np.ndarray,
                  accumulate: str | None = None) -> Tolerance:
    """The tolerance for one output, given the reference values it will be checked
    against (`accumulate`: see `relative_tolerance`)."""
    tol = relative_tolerance(dtype, reduction_extent, accumulate)
    if tol is None:
        return Tolerance()
    ref = np.asarray(reference, dtype=np.float64)
    finite = np.abs(ref[np.isfinite(ref)])
    scale = float(finite.max()) if finite.size else 0.0
    return Tolerance(rtol=tol, atol=tol * (scale if scale > 0 else 1.0), exact=False)


def compare(name: str, actual: np.ndarray, expected: np.ndarray, tol: Tolerance) -> str | None:
    """None when `actual` matches; otherwise one line saying how it does not."""
    if actual.shape != expected.shape:
        return f"output {name}: shape {actual.shape}, expected {expected.shape}"
    if tol.exact:
        bad = actual != expected
        if not bad.any():
            return None
        idx = np.unravel_index(int(np.argmax(bad)), bad.shape)
        return (f"output {name}: {int(bad.sum())} of {bad.size} elements differ (exact dtype); "
                f"first at {tuple(int(i) for i in idx)}: got {actual[idx]}, "
                f"expected {expected[idx]}")
    out = np.asarray(actual, dtype=np.float64)
    ref = np.asarray(expected, dtype=np.float64)
    nan_bad = np.isnan(out) != np.isnan(ref)
    inf_bad = (np.isinf(out) | np.isinf(ref)) & (out != ref) & ~np.isnan(out) & ~np.isnan(ref)
    both = np.isfinite(out) & np.isfinite(ref)
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf where both are inf
        err = np.where(both, np.abs(out - ref), 0.0)
    bad = nan_bad | inf_bad | (err > tol.atol + tol.rtol * np.abs(ref))
    if not bad.any():
        return None
    return _describe(name, out, ref, err, bad, nan_bad, tol)


def _describe(name, out, ref, err, bad, nan_bad, tol) -> str:
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(np.abs(ref) > 0, err / np.abs(ref), np.where(err > 0, np.inf, 0.0))
    idx = np.unravel_index(int(np.argmax(np.where(bad, err, -1.0))), bad.shape)
    parts = [f"output {name}: {int(bad.sum())} of {bad.size} elements outside tolerance",
             f"max abs err {err.max():.3e}", f"max rel err {rel.max():.3e}"]
    if nan_bad.any():
        parts.append(f"{int((np.isnan(out) & ~np.isnan(ref)).sum())} NaN where the "
                     "reference has a number")
    parts.append(f"worst at {tuple(int(i) for i in idx)}: got {out[idx]:.6g}, "
                 f"expected {ref[idx]:.6g}")
    parts.append(f"rtol={tol.rtol:.2e} atol={tol.atol:.2e}")
    return "; ".join(parts)
