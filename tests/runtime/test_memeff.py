"""Memory-efficient GELU and LayerNorm: gradients, stated tolerances, and bytes saved."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from autosched.runtime import memeff
from autosched.runtime.memeff.kernels import (
    NEAR_MIN_GRAD_ERR,
    TORCH_GELU,
    Kernel,
    gelu_tables,
)
from autosched.runtime.meter import SavedTensorMeter, model_state


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_gradcheck_float64(approximate):
    torch.manual_seed(0)
    x = (torch.randn(64, dtype=torch.float64) * 3).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: memeff.gelu(t, approximate), (x,))


@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_gradcheck_float64(affine):
    torch.manual_seed(0)
    x = torch.randn(3, 5, 8, dtype=torch.float64, requires_grad=True)
    w = (torch.randn(8, dtype=torch.float64) + 2).requires_grad_() if affine else None
    b = torch.randn(8, dtype=torch.float64, requires_grad=True) if affine else None
    args = (x, w, b) if affine else (x,)
    assert torch.autograd.gradcheck(
        lambda x, w=None, b=None: memeff.layer_norm(x, (8,), w, b, 1e-5), args)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_fp32_within_stated_tolerance(approximate):
    torch.manual_seed(0)
    x = torch.cat([torch.linspace(-12, 12, 200_001), torch.randn(10_000)]).requires_grad_()
    memeff.gelu(x, approximate).backward(torch.ones_like(x))
    exact = torch.ops.aten.gelu_backward(torch.ones(x.shape, dtype=torch.float64),
                                         x.detach().double(), approximate=approximate)
    err = (x.grad.double() - exact).abs()
    near = (x.detach() - gelu_tables(approximate).x_min).abs() < 0.1
    assert err[~near].max() <= 5e-6
    assert err[near].max() <= NEAR_MIN_GRAD_ERR
    y_ref = nn.functional.gelu(x.detach(), approximate=approximate)
    assert torch.equal(memeff.gelu(x.detach(), approximate), y_ref)   # forward is exact


def test_layer_norm_fp32_matches_eager():
    torch.manual_seed(0)
    norm = nn.LayerNorm(64)
    with torch.no_grad():
        norm.weight.normal_(1, 0.2)
        norm.bias.normal_(0, 0.2)
    x = torch.randn(16, 64, requires_grad=True)
    g = torch.randn(16, 64)
    ref = norm(x)
    ref.backward(g)
    ref_grads = [t.grad.clone() for t in (x, norm.weight, norm.bias)]
    for t in (x, norm.weight, norm.bias):
        t.grad = None
    out = memeff.MemEffLayerNorm(norm)(x)
    assert torch.equal(out, ref)
    out.backward(g)
    for got, want in zip((x.grad, norm.weight.grad, norm.bias.grad), ref_grads):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_zero_weight_falls_back_to_the_exact_layer_norm():
    norm = nn.LayerNorm(16)
    with torch.no_grad():
        norm.weight[3] = 0.0
    torch.manual_seed(0)
    x = torch.randn(4, 16, requires_grad=True)
    with SavedTensorMeter(model_state(norm)) as meter:
        out = memeff.MemEffLayerNorm(norm)(x)
    assert x.untyped_storage().data_ptr() in {k[2] for k in meter.storages}   # x is saved
    out.sum().backward()
    ref_x = x.detach().clone().requires_grad_()
    nn.functional.layer_norm(ref_x, (16,), norm.weight, norm.bias).sum().backward()
    torch.testing.assert_close(x.grad, ref_x.grad)


def _swapped_inputs(block, x):
    seen, handles = {}, []
    for name in memeff.swappable(block):
        handles.append(block.get_submodule(name).register_forward_pre_hook(
            lambda m, a, n=name: seen.__setitem__(n, a[0])))
    block(x)
    for h in handles:
        h.remove()
    return seen


@pytest.mark.parametrize("kinds", [("gelu", "layer_norm"), ("layer_norm",), ("gelu",)])
def test_block_bytes_cut_by_the_predicted_amount(gpt, kinds):
    block = gpt.make_model(n_layer=1, d_model=64, n_head=2, seq_len=32, vocab=16).blocks[0]
    x = torch.randn(4, 32, 64, requires_grad=True)
    with SavedTensorMeter(model_state(block)) as keep:
        block(x)
    with SavedTensorMeter(model_state(block)) as lean:
        memeff.swap_memeff(block, kinds)(x)
    predicted = memeff.predicted_savings(block, _swapped_inputs(block, x), kinds)
    # GELU: 4*32*256 fp32 -> 1-byte mask; two LayerNorms: input and mean of 4*32 rows go
    gelu = 4 * 32 * 256 * 4 - 4 * 32 * 256
    norms = 2 * (4 * 32 * 64 * 4 + 4 * 32 * 4)
    assert predicted == gelu * ("gelu" in kinds) + norms * ("layer_norm" in kinds)
    assert keep.device_bytes - lean.device_bytes == predicted


def test_swap_shares_parameters_and_leaves_the_original(gpt):
    block = gpt.make_model(n_layer=1, d_model=32, n_head=2, seq_len=8, vocab=16).blocks[0]
    lean = memeff.swap_memeff(block)
    assert type(block.act) is nn.GELU and type(block.ln1) is nn.LayerNorm
    assert isinstance(lean.act, memeff.MemEffGELU) and lean.ln1.weight is block.ln1.weight
    assert {id(p) for p in lean.parameters()} == {id(p) for p in block.parameters()}


def test_a_plugged_in_kernel_is_the_one_that_runs():
    calls = []

    def fwd(x, approximate):
        calls.append("forward")
        return TORCH_GELU.forward(x, approximate)

    def bwd(g, y, mask, approximate):
        calls.append("backward")
        return TORCH_GELU.backward(g, y, mask, approximate)

    kernel = Kernel("rec-42", fwd, bwd)
    x = torch.randn(8, requires_grad=True)
    memeff.MemEffGELU(kernel=kernel)(x).sum().backward()
    assert calls == ["forward", "backward"]
    assert "rec-42" in repr(memeff.MemEffGELU(kernel=kernel))
