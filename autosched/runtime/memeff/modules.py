"""nn.Module drop-ins for nn.GELU and nn.LayerNorm that run the memory-efficient forms.

`ops=True` runs the custom-op form (ops.py) that torch.compile keeps opaque; the default is
the autograd Function (functions.py), the eager form. Both save the same tensors.
"""
from __future__ import annotations

from torch import nn

from . import ops as _ops
from .functions import gelu, layer_norm
from .kernels import TORCH_GELU, TORCH_LAYER_NORM, Kernel


class MemEffGELU(nn.Module):
    """Drop-in for nn.GELU (same `approximate`), saving output + mask."""

    def __init__(self, approximate: str = "none", kernel: Kernel = TORCH_GELU, ops: bool = False):
        super().__init__()
        self.approximate, self.kernel, self.ops = approximate, kernel, ops
        self._op_kernel = _ops.kernel_id("gelu", kernel) if ops else None

    def forward(self, x):
        if self.ops:
            return _ops.gelu(x, self.approximate, self._op_kernel)
        return gelu(x, self.approximate, self.kernel)

    def extra_repr(self):
        return f"approximate={self.approximate!r}, kernel={self.kernel.id!r}, ops={self.ops}"


class MemEffLayerNorm(nn.Module):
    """Drop-in for nn.LayerNorm sharing the original's weight and bias parameters."""

    def __init__(self, original: nn.LayerNorm, kernel: Kernel = TORCH_LAYER_NORM,
                 ops: bool = False):
        super().__init__()
        self.normalized_shape, self.eps = tuple(original.normalized_shape), original.eps
        self.weight, self.bias = original.weight, original.bias
        self.kernel, self.ops = kernel, ops
        self._op_kernel = _ops.kernel_id("layer_norm", kernel) if ops else None

    def forward(self, x):
        if self.ops:
            return _ops.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps,
                                   self._op_kernel)
        return layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps,
                          self.kernel)
