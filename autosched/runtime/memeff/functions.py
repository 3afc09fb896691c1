"""Memory-efficient GELU and LayerNorm as autograd Functions: save the output, not the input.

In a transformer block the output of each LayerNorm is saved anyway (the next Linear saves
its input) and so is the output of GELU (the second MLP Linear saves its input). Saving
the output here instead of the input therefore frees the input's storage:

* GELU saves y and a 1-byte mask instead of x: per element 4 bytes (fp32 x) become 1.
* LayerNorm saves y and 1/std per row instead of x: the input's bytes become rows * 4.

The arithmetic is a pluggable Kernel (kernels.py, where the gradient tolerances are
documented); the Functions here only decide what is saved.
"""
from __future__ import annotations

import torch

from .kernels import TORCH_GELU, TORCH_LAYER_NORM, Kernel


class _GeluFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, approximate, kernel):
        y, mask = kernel.forward(x, approximate)
        ctx.save_for_backward(y, mask)
        ctx.approximate, ctx.kernel = approximate, kernel
        return y

    @staticmethod
    def backward(ctx, grad_y):
        y, mask = ctx.saved_tensors
        return ctx.kernel.backward(grad_y, y, mask, ctx.approximate), None, None


class _LayerNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, normalized_shape, weight, bias, eps, kernel):
        y, rstd = kernel.forward(x, normalized_shape, weight, bias, eps)
        ctx.save_for_backward(y, rstd, weight, bias)
        ctx.normalized_shape, ctx.kernel = normalized_shape, kernel
        return y

    @staticmethod
    def backward(ctx, grad_y):
        y, rstd, weight, bias = ctx.saved_tensors
        needs = (ctx.needs_input_grad[0], weight is not None and ctx.needs_input_grad[2],
                 bias is not None and ctx.needs_input_grad[3])
        gx, gw, gb = ctx.kernel.backward(grad_y, y, rstd, weight, bias, ctx.normalized_shape,
                                         needs)
        return gx, None, gw, gb, None, None


def gelu(x, approximate: str = "none", kernel: Kernel = TORCH_GELU):
    """GELU that saves its output and a 1-byte mask for backward."""
    return _GeluFn.apply(x, approximate, kernel)


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5,
               kernel: Kernel = TORCH_LAYER_NORM):
    """LayerNorm that saves its output and 1/std for backward.

    An affine weight with an exact zero makes the input unrecoverable from the output; then
    the standard LayerNorm runs (it saves the input), so the result is always exact.
    """
    if weight is not None and not weight_invertible(weight):
        return torch.nn.functional.layer_norm(x, normalized_shape, weight, bias, eps)
    return _LayerNormFn.apply(x, tuple(normalized_shape), weight, bias, eps, kernel)


def weight_invertible(weight: torch.Tensor) -> bool:
    """Whether a LayerNorm weight has no exact zero (its input is recoverable from y)."""
    # Reading the weight syncs a GPU: the answer is cached on the tensor per version.
    cached = getattr(weight, "_autosched_nonzero", None)
    if cached is not None and cached[0] == weight._version:
        return cached[1]
    ok = bool((weight != 0).all())
    try:
        weight._autosched_nonzero = (weight._version, ok)
    except (AttributeError, RuntimeError):
        pass
    return ok
