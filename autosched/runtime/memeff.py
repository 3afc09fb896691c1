"""Memory-efficient GELU and LayerNorm: autograd Functions, modules, and the module swap.

In a transformer block the output of each LayerNorm is saved anyway (the next Linear saves
its input) and so is the output of GELU (the second MLP Linear saves its input). Saving
the output here instead of the input therefore frees the input's storage:

* GELU saves y and a 1-byte mask instead of x: per element 4 bytes (fp32 x) become 1.
* LayerNorm saves y and 1/std per row instead of x: the input's bytes become rows * 4.

`predicted_savings(module, input)` states those bytes; the tests check the measured cut
against it. The kernels are pluggable (see memeff_kernels.Kernel); gradient tolerances
are documented there.
"""
from __future__ import annotations

import copy

import torch
from torch import nn

from .memeff_kernels import TORCH_GELU, TORCH_LAYER_NORM, Kernel


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
    if weight is not None and not _weight_invertible(weight):
        return torch.nn.functional.layer_norm(x, normalized_shape, weight, bias, eps)
    return _LayerNormFn.apply(x, tuple(normalized_shape), weight, bias, eps, kernel)


def _weight_invertible(weight: torch.Tensor) -> bool:
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


class MemEffGELU(nn.Module):
    """Drop-in for nn.GELU (same `approximate`), saving output + mask."""

    def __init__(self, approximate: str = "none", kernel: Kernel = TORCH_GELU):
        super().__init__()
        self.approximate, self.kernel = approximate, kernel

    def forward(self, x):
        return gelu(x, self.approximate, self.kernel)

    def extra_repr(self):
        return f"approximate={self.approximate!r}, kernel={self.kernel.id!r}"


class MemEffLayerNorm(nn.Module):
    """Drop-in for nn.LayerNorm sharing the original's weight and bias parameters."""

    def __init__(self, original: nn.LayerNorm, kernel: Kernel = TORCH_LAYER_NORM):
        super().__init__()
        self.normalized_shape, self.eps = tuple(original.normalized_shape), original.eps
        self.weight, self.bias = original.weight, original.bias
        self.kernel = kernel

    def forward(self, x):
        return layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps, self.kernel)


KINDS = {"gelu": nn.GELU, "layer_norm": nn.LayerNorm}


def swappable(module: nn.Module, kinds=("gelu", "layer_norm")) -> list[str]:
    """Names of the submodules of these kinds (exactly nn.GELU / nn.LayerNorm) a swap replaces."""
    types = tuple(KINDS[k] for k in kinds)
    return [n for n, m in module.named_modules() if type(m) in types and n]


def clone_structure(module: nn.Module) -> nn.Module:
    """A copy of the module tree that shares every parameter and buffer with `module`.

    Submodules of the copy can be replaced without touching the original.
    """
    new = copy.copy(module)
    new._parameters = dict(module._parameters)
    new._buffers = dict(module._buffers)
    new._modules = {n: clone_structure(m) if m is not None else None
                    for n, m in module._modules.items()}
    for hooks in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
                  "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs"):
        if hasattr(module, hooks):
            setattr(new, hooks, copy.copy(getattr(module, hooks)))
    return new


def swap_memeff(module: nn.Module, kinds=("gelu", "layer_norm"), gelu_kernel: Kernel = TORCH_GELU,
                ln_kernel: Kernel = TORCH_LAYER_NORM) -> nn.Module:
    """A structure clone of `module` whose GELU and/or LayerNorm modules (`kinds`) are
    memory-efficient."""
    new = clone_structure(module)
    for name in swappable(new, kinds):
        parent_name, _, child = name.rpartition(".")
        parent = new.get_submodule(parent_name) if parent_name else new
        old = getattr(parent, child)
        repl = (MemEffGELU(old.approximate, gelu_kernel) if isinstance(old, nn.GELU)
                else MemEffLayerNorm(old, ln_kernel))
        setattr(parent, child, repl)
    return new


def predicted_savings(module: nn.Module, inputs_by_name: dict,
                      kinds=("gelu", "layer_norm")) -> int:
    """Bytes a memory-efficient swap frees, given each swapped submodule's input tensor.

    Assumes (as in a transformer block) that each swapped module's output is saved by its
    consumer anyway. GELU: x (saved by aten.gelu) becomes a 1-byte mask. LayerNorm: x and
    the per-row mean (saved by aten.native_layer_norm) go; 1/std stays in both.
    """
    total = 0
    for name in swappable(module, kinds):
        x = inputs_by_name[name]
        m = module.get_submodule(name)
        if isinstance(m, nn.GELU):
            total += x.numel() * x.element_size() - x.numel()
        else:
            rows = x.numel() // max(1, _numel(m.normalized_shape))
            stat_size = max(4, x.element_size())      # mean/rstd are at least fp32
            total += x.numel() * x.element_size() + rows * stat_size
    return total


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
