"""Fixtures for the runtime tests: one torch thread, tiny GPT / MLP models from examples/."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    # The machine's cores are shared: the runtime tests use one thread, always.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def load_example(name: str):
    """The example module, registered in sys.modules under its name: dynamo imports the
    module of every function it compiles, and one it cannot import fails the test run
    alone (in the suite's order another test had imported it)."""
    from support.modules import load_by_path

    module_name = f"runtime_example_{name}"
    if module_name not in sys.modules:
        sys.modules[module_name] = load_by_path(EXAMPLES / f"{name}.py", module_name)
    return sys.modules[module_name]


@pytest.fixture(scope="session")
def gpt():
    return load_example("gpt")


@pytest.fixture(scope="session")
def mlp():
    return load_example("mlp")


TINY = dict(n_layer=2, d_model=32, n_head=2, seq_len=16, vocab=32)


@pytest.fixture
def tiny_gpt(gpt):
    """(model, inputs, loss_fn): a 2-layer GPT small enough for exact checks."""
    model = gpt.make_model(**TINY)
    inputs = gpt.make_inputs(batch=2, seq_len=TINY["seq_len"], vocab=TINY["vocab"])
    return model, inputs, gpt.loss_fn


@pytest.fixture
def bw_path(tmp_path):
    return tmp_path / "bandwidth.json"


def _grads(model, run, inputs, loss_fn):
    from autosched.model.training_step import parameter_grads

    return parameter_grads(run, inputs, loss_fn, model)


@pytest.fixture
def grads():
    """grads(model, run, inputs, loss_fn): `model`'s parameter gradients after one step of
    `run` (a planned model sharing those parameters)."""
    return _grads
