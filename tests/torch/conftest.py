"""Fixtures: one small kernel library of the nn ops, compiled once per session."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # torch_libbuild

F64 = {"dtype": "float64"}
# Two float32 linear shapes (dispatch over variants), the MLP of the training test, and a
# float64 shape per op for gradcheck.
LINEAR = [{"M": 8, "N": 6, "K": 4}, {"M": 8, "N": 3, "K": 6}, {"M": 4, "N": 3, "K": 5, **F64},
          {"M": 16, "N": 12, "K": 8}, {"M": 16, "N": 4, "K": 12}]
MATMUL = [{"M": 8, "N": 5, "K": 6}, {"M": 3, "N": 4, "K": 2, **F64}]
ROWS = [{"M": 8, "N": 16}, {"M": 4, "N": 5, **F64}, {"M": 16, "N": 12}]
MLP = {"batch": 16, "d_in": 8, "hidden": 12, "d_out": 4}


def _rows(shapes):
    out = []
    for s in shapes:
        r = {k: v for k, v in s.items() if k != "K"}
        if r not in out:
            out.append(r)
    return out


SELECTION = {
    "linear": LINEAR, "linear_grad_x": LINEAR, "linear_grad_w": LINEAR,
    "linear_grad_b": _rows(LINEAR),
    "matmul": MATMUL, "matmul_grad_a": MATMUL, "matmul_grad_b": MATMUL,
    "gelu": ROWS, "gelu_grad": ROWS, "softmax": ROWS, "softmax_grad": ROWS,
    "layer_norm": ROWS, "layer_norm_grad_x": ROWS, "layer_norm_grad_gamma": ROWS,
    "layer_norm_grad_beta": ROWS,
}


@pytest.fixture(scope="session")
def nn_library(tmp_path_factory) -> Path:
    """Path of the compiled library of examples/nn_ops.py at the shapes above."""
    from torch_libbuild import build_library

    return build_library(tmp_path_factory.mktemp("nn") / "lib", SELECTION)


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
