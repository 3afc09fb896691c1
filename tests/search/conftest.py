"""Fixtures for search tests: the synthetic test device (tests/search/synthetic.py)."""
from __future__ import annotations

from pathlib import Path

import pytest


def load_synthetic():
    """Import tests/search/synthetic.py by path (tests are not a package)."""
    from support.modules import load_by_path

    return load_by_path(Path(__file__).with_name("synthetic.py"), "autosched_test_synthetic")


@pytest.fixture(scope="session")
def synthetic():
    return load_synthetic()


@pytest.fixture(scope="session")
def matmul_space(synthetic):
    return synthetic.make_space(synthetic.matmul_task())
