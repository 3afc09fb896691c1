"""Fixtures for search tests: the synthetic test device (tests/search/synthetic.py)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


def load_synthetic():
    """Import tests/search/synthetic.py by path (tests are not a package)."""
    path = Path(__file__).with_name("synthetic.py")
    spec = importlib.util.spec_from_file_location("autosched_test_synthetic", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def synthetic():
    return load_synthetic()


@pytest.fixture(scope="session")
def matmul_space(synthetic):
    return synthetic.make_space(synthetic.matmul_task())
