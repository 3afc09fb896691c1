"""The module swap: a structure clone of a module with its GELU / LayerNorm made
memory-efficient, and the bytes that swap frees.

`predicted_savings(module, inputs)` states those bytes; the tests check the measured cut
against it.
"""
from __future__ import annotations

import math

from torch import nn

from ..module_tree import clone_structure, replace_submodule
from .kernels import TORCH_GELU, TORCH_LAYER_NORM, Kernel
from .modules import MemEffGELU, MemEffLayerNorm

KINDS = {"gelu": nn.GELU, "layer_norm": nn.LayerNorm}


def swappable(module: nn.Module, kinds=("gelu", "layer_norm")) -> list[str]:
    """Names of the submodules of these kinds (exactly nn.GELU / nn.LayerNorm) a swap replaces."""
    types = tuple(KINDS[k] for k in kinds)
    return [n for n, m in module.named_modules() if type(m) in types and n]


def swap_memeff(module: nn.Module, kinds=("gelu", "layer_norm"), gelu_kernel: Kernel = TORCH_GELU,
                ln_kernel: Kernel = TORCH_LAYER_NORM, ops: bool = False) -> nn.Module:
    """A structure clone of `module` whose GELU and/or LayerNorm modules (`kinds`) are
    memory-efficient (`ops=True`: the custom-op form torch.compile keeps, see ops.py)."""
    new = clone_structure(module)
    for name in swappable(new, kinds):
        old = new.get_submodule(name)
        repl = (MemEffGELU(old.approximate, gelu_kernel, ops) if isinstance(old, nn.GELU)
                else MemEffLayerNorm(old, ln_kernel, ops))
        replace_submodule(new, name, repl)
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
            rows = x.numel() // max(1, math.prod(m.normalized_shape))
            stat_size = max(4, x.element_size())      # mean/rstd are at least fp32
            total += x.numel() * x.element_size() + rows * stat_size
    return total
