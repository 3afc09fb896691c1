"""The output-checking rule: tolerances per dtype and reduction length, NaN/inf handling."""
import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autosched.measure.reference.check import Tolerance, compare, relative_tolerance, tolerance_for


@pytest.mark.parametrize("dtype, extent, expected", [
    ("float32", 1, 1e-5),                               # floor
    ("float32", 1024, 4 * 2.0 ** -23 * 32),             # 4 eps sqrt(R) = 1.53e-5
    ("float32", 2 ** 30, 1e-3),                         # cap
    ("float64", 1, 1e-12),
    ("float64", 4096, 4 * 2.0 ** -52 * 64),
    ("float16", 1, 1e-2),
    ("float16", 64, 4 * 2.0 ** -10 * 8),                # 3.1e-2
    ("float16", 1024, 5e-2),                            # cap
    ("bfloat16", 1, 6e-2),
    ("bfloat16", 64, 4 * 2.0 ** -7 * 8),                # 0.25 = cap
    ("bfloat16", 1024, 0.25),
])
def test_relative_tolerance_follows_the_documented_rule(dtype, extent, expected):
    assert relative_tolerance(dtype, extent) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("dtype, extent, accumulate, expected", [
    ("bfloat16", 64, "float32", 2.0 ** -6),             # two bf16 rounding steps, not 0.25
    ("bfloat16", 1024, "float32", 2.0 ** -6),
    ("float16", 64, "float32", 2.0 ** -9),
    ("float16", 2 ** 30, "float32", 2.0 ** -9),         # above float32's cap of 1e-3
    ("float16", 64, "float16", 4 * 2.0 ** -10 * 8),     # summed in the half type: as before
    ("float16", 64, None, 4 * 2.0 ** -10 * 8),
    ("float32", 1024, "float32", 4 * 2.0 ** -23 * 32),  # float32 itself: unchanged
])
def test_half_outputs_of_float32_sums_are_one_rounding_away(dtype, extent, accumulate, expected):
    assert relative_tolerance(dtype, extent, accumulate) == pytest.approx(expected, rel=1e-12)


def test_a_bfloat16_answer_off_by_ten_percent_now_fails():
    ref = np.linspace(1, 2, 64).astype(np.float32)
    off = ref * 1.10
    loose = tolerance_for("bfloat16", 64, ref)
    tight = tolerance_for("bfloat16", 64, ref, accumulate="float32")
    assert compare("C", off, ref, loose) is None
    assert compare("C", off, ref, tight).startswith("output C: 64 of 64 elements outside")
    assert compare("C", ref * (1 + 2.0 ** -8), ref, tight) is None  # one rounding step


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "bool"])
def test_integer_and_boolean_outputs_are_exact(dtype):
    assert relative_tolerance(dtype, 1000) is None
    ref = np.arange(12).reshape(3, 4).astype(dtype)
    tol = tolerance_for(dtype, 1000, ref)
    assert tol == Tolerance(exact=True)
    assert compare("y", ref.copy(), ref, tol) is None
    bad = ref.copy()
    bad[2, 1] = not bad[2, 1] if dtype == "bool" else bad[2, 1] + 1
    msg = compare("y", bad, ref, tol)
    assert msg.startswith("output y: 1 of 12 elements differ") and "(2, 1)" in msg


def test_atol_scales_with_the_largest_reference_value():
    ref = np.array([[0.0, -40.0], [3.0, np.nan]], dtype=np.float32)
    tol = tolerance_for("float32", 1024, ref)
    rtol = 4 * 2.0 ** -23 * 32
    assert tol.rtol == pytest.approx(rtol)
    assert tol.atol == pytest.approx(rtol * 40.0)
    assert tolerance_for("float32", 1, np.zeros(3, np.float32)).atol == pytest.approx(1e-5)


def test_reordered_matmul_passes_and_plus_one_fails():
    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, (32, 1024)).astype(np.float32)
    b = rng.uniform(-1, 1, (1024, 32)).astype(np.float32)
    ref = a @ b
    # the same product summed in 16 blocks of 64: another legal order
    blocked = sum(a[:, i:i + 64] @ b[i:i + 64, :] for i in range(0, 1024, 64)).astype(np.float32)
    tol = tolerance_for("float32", 1024, ref)
    assert not np.array_equal(blocked, ref)
    assert compare("C", blocked, ref, tol) is None
    msg = compare("C", ref + 1, ref, tol)
    assert "1024 of 1024 elements outside tolerance" in msg and "max abs err 1.000e+00" in msg


def test_bfloat16_outputs_compare_in_float():
    ref = np.linspace(-2, 2, 16).astype(ml_dtypes.bfloat16)
    tol = tolerance_for("bfloat16", 1, ref)
    assert compare("y", ref.copy(), ref, tol) is None
    wrong = (ref.astype(np.float32) * 1.5).astype(ml_dtypes.bfloat16)
    assert compare("y", wrong, ref, tol) is not None


def test_nan_where_the_reference_has_a_number_is_wrong():
    ref = np.ones((4, 4), np.float32)
    out = ref.copy()
    out[1, 2] = np.nan
    msg = compare("C", out, ref, tolerance_for("float32", 1, ref))
    assert "1 of 16 elements outside tolerance" in msg
    assert "1 NaN where the reference has a number" in msg


def test_nan_and_inf_must_match_the_reference_in_place():
    ref = np.array([np.nan, np.inf, -np.inf, 1.0], np.float32)
    tol = tolerance_for("float32", 1, ref)
    assert compare("y", ref.copy(), ref, tol) is None
    for bad in ([0.0, np.inf, -np.inf, 1.0],      # number where NaN
                [np.nan, -np.inf, -np.inf, 1.0],  # wrong sign of inf
                [np.nan, 3.0, -np.inf, 1.0],      # number where inf
                [np.nan, np.inf, -np.inf, np.inf]):  # inf where number
        assert compare("y", np.array(bad, np.float32), ref, tol) is not None, bad


def test_shape_mismatch_is_reported():
    ref = np.zeros((2, 3), np.float32)
    msg = compare("C", np.zeros((3, 2), np.float32), ref, tolerance_for("float32", 1, ref))
    assert msg == "output C: shape (3, 2), expected (2, 3)"


@settings(max_examples=60, deadline=None)
@given(dtype=st.sampled_from(["float16", "float32", "float64"]),
       extent=st.integers(1, 1 << 16),
       frac=st.floats(0.0, 0.45))
def test_errors_below_half_the_tolerance_pass_and_above_three_times_fail(dtype, extent, frac):
    rng = np.random.default_rng(extent)
    ref = rng.uniform(-3, 3, 64).astype(dtype)
    tol = tolerance_for(dtype, extent, ref)
    scale = float(np.abs(ref.astype(np.float64)).max())
    step = tol.rtol * scale
    close = (ref.astype(np.float64) + frac * step).astype(np.float64)
    assert compare("y", close, ref, tol) is None
    far = ref.astype(np.float64).copy()
    far[7] += 3.0 * step + 3.0 * tol.rtol * abs(float(far[7]))
    assert math.isfinite(far[7]) and compare("y", far, ref, tol) is not None
