"""Helpers of the compiled-plan tests: a fresh dynamo per test, saved bytes of one step,
gradient error."""
from __future__ import annotations

import pytest
import torch

from autosched.runtime.meter import SavedTensorMeter
from autosched.model.training_step import compute_loss


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Imported into a test module: every test there starts and ends with no compiled
    variants left over."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def saved_bytes(run, inputs, loss_fn, state) -> int:
    """Activation bytes one training step of `run` saves, `state` (parameters) left out."""
    with SavedTensorMeter(state) as meter:
        loss = compute_loss(run, inputs, loss_fn)
    loss.backward()
    meter.release()
    return meter.device_bytes


def max_rel_error(ref, got) -> float:
    """The largest gradient error relative to its tensor's largest reference value."""
    return max(float((got[n] - r).abs().max() / r.abs().max()) for n, r in ref.items())
