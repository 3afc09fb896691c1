"""Fixtures: one small kernel library of the nn ops, compiled once per session."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # torch_libbuild

@pytest.fixture(scope="session")
def nn_library(tmp_path_factory) -> Path:
    """Path of the compiled library of examples/nn_ops.py at the shapes above."""
    from torch_libbuild import TEST_SELECTION, build_library

    return build_library(tmp_path_factory.mktemp("nn") / "lib", TEST_SELECTION)


@pytest.fixture
def references_on_path(monkeypatch):
    """Make examples/nn_reference.py importable, as the op file's torch_reference needs."""
    monkeypatch.syspath_prepend(str(HERE.parents[1] / "examples"))


@pytest.fixture
def nn_ops(nn_library):
    """The library loaded without fallback; torch.ops.autosched.* bound to it."""
    import autosched.torch

    return autosched.torch.load_library(nn_library)


@pytest.fixture
def nn_ops_fallback(nn_library, references_on_path):
    import autosched.torch

    return autosched.torch.load_library(nn_library, fallback=True)
