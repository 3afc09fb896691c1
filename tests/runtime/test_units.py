"""Memory-budget strings: every accepted form, and one-line UserErrors for the rest."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from autosched.errors import UserError
from autosched.runtime.units import format_bytes, parse_budget


@pytest.mark.parametrize("spec, expected", [
    ("2GiB", 2 << 30), ("512MiB", 512 << 20), ("1.5GB", 1_500_000_000), ("1000000", 1_000_000),
    ("64KiB", 65536), ("3kb", 3000), (" 7 MiB ", 7 << 20), ("60%", 600), ("100%", 1000),
    ("12.5%", 125), (4096, 4096), (1e6, 1_000_000), ("10B", 10), (".5GiB", 1 << 29),
])
def test_accepted_forms(spec, expected):
    assert parse_budget(spec, reference_bytes=1000) == expected


@pytest.mark.parametrize("spec", ["", "abc", "2 GiBs", "GiB", "-1GiB", "0", "0%", "1e3",
                                  "1.2.3MB", "50 %%", "2XB", True, -5, 0, float("nan"),
                                  float("inf")])
def test_malformed_budget_is_one_line_user_error(spec):
    with pytest.raises(UserError) as info:
        parse_budget(spec, reference_bytes=1000)
    assert "\n" not in str(info.value) and "budget" in str(info.value)


def test_percentage_needs_a_reference():
    with pytest.raises(UserError, match="percentage"):
        parse_budget("50%")


@given(st.integers(min_value=1, max_value=1 << 50))
def test_plain_bytes_round_trip(n):
    assert parse_budget(str(n)) == n


def test_format_bytes():
    assert format_bytes(512) == "512 B"
    assert format_bytes(1536) == "1.50 KiB"
    assert format_bytes(3 << 30) == "3.00 GiB"
