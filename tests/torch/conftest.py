"""Fixtures: one small kernel library of the nn ops, compiled once per session."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parents[1] / "examples" / "train_mlp.py"


@pytest.fixture(scope="session")
def nn_library(tmp_path_factory) -> Path:
    """Path of the compiled library of examples/nn_ops.py at the shapes above."""
    from support.torch_library import TEST_SELECTION, build_library

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


@pytest.fixture(scope="session")
def train_mlp():
    """examples/train_mlp.py as a module."""
    spec = importlib.util.spec_from_file_location("train_mlp_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]
