"""The saved-activation meter counts exactly the storages autograd holds for backward."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from autosched.runtime.meter import SavedTensorMeter, model_state
from autosched.runtime.offload import LayerOffload
from autosched.runtime.checkpointing import (
    checkpoint_reporting_cache,
    checkpoint_reporting_outputs,
    full_checkpoint,
    save_compute_heavy,
    selective_checkpoint,
)


def _block():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU())


def metered(model, fn):
    with SavedTensorMeter(model_state(model)) as meter:
        out = fn()
    return meter, out


def test_linear_relu_counts_input_and_relu_output_not_weights():
    m, x = _block(), torch.randn(32, 64, requires_grad=True)
    meter, out = metered(m, lambda: m(x))
    # addmm saves x (32*64*4) and W^T (a parameter: left out); relu saves its output (32*128*4)
    assert meter.device_bytes == 32 * 64 * 4 + 32 * 128 * 4
    assert meter.host_bytes == 0


def test_views_of_one_storage_count_once():
    a = torch.randn(64, 32, requires_grad=True)
    with SavedTensorMeter() as meter:
        b = a.exp()                              # saves b
        c = b[:32].sin().sum() + b[32:].cos().sum()   # save two views of b
    assert meter.device_bytes == 64 * 32 * 4
    assert len(meter.storages) == 1


def test_checkpoint_keeps_only_the_input():
    m, x = _block(), torch.randn(32, 64, requires_grad=True)
    meter, out = metered(m, lambda: full_checkpoint(m, x))
    assert meter.device_bytes == 32 * 64 * 4


def test_selective_policy_reports_its_cached_matmul_output():
    torch.manual_seed(0)
    m, x = _block(), torch.randn(32, 64, requires_grad=True)
    meter, out = metered(m, lambda: selective_checkpoint(m, x))
    # the input (saved by the checkpoint) + the addmm output the policy keeps; relu recomputed
    assert meter.device_bytes == 32 * 64 * 4 + 32 * 128 * 4
    out.sum().backward()
    ref = _block()
    ref(x.detach().requires_grad_()).sum().backward()
    torch.testing.assert_close(m[0].weight.grad, ref[0].weight.grad)


@pytest.mark.parametrize("reporting", [checkpoint_reporting_outputs,
                                       checkpoint_reporting_cache])
def test_both_ways_of_reporting_the_policy_cache_count_the_same(reporting):
    """The policy's own report (torch with ctx.op_output) and the cache read after the
    forward (older torch, e.g. the GPU machine's 2.11) count the same bytes."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 96), nn.Tanh())
    x = torch.randn(32, 64, requires_grad=True)
    meter, out = metered(m, lambda: reporting(m, x, policy=save_compute_heavy))
    # the input + both addmm outputs the policy keeps; GELU and tanh recomputed
    assert meter.device_bytes == 32 * 64 * 4 + 32 * 128 * 4 + 32 * 96 * 4
    out.sum().backward()
    ref = copy.deepcopy(m)
    for p in ref.parameters():
        p.grad = None
    ref(x.detach()).sum().backward()
    torch.testing.assert_close(m[2].weight.grad, ref[2].weight.grad)


def test_offloaded_tensors_count_as_host_bytes():
    m, x = _block(), torch.randn(32, 64, requires_grad=True)
    keys = {(t.device.type, t.device.index, t.untyped_storage().data_ptr(),
             t.untyped_storage().nbytes()) for t in model_state(m)}
    off = LayerOffload(keys)

    def run():
        with off.hooks():
            return m(x)
    meter, out = metered(m, run)
    assert meter.device_bytes == 0
    assert meter.host_bytes == 32 * 64 * 4 + 32 * 128 * 4


def test_contexts_record_who_saved():
    a = torch.randn(256, requires_grad=True)
    with SavedTensorMeter() as meter:
        meter.context = "first"
        b = a.exp()
        meter.context = "second"
        b.sin()
    (entry,) = meter.storages.values()
    assert entry.contexts == {"first", "second"}
