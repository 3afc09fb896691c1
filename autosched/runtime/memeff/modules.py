"""nn.Module drop-ins for nn.GELU and nn.LayerNorm that run the memory-efficient forms."""
from __future__ import annotations

from torch import nn

from .functions import gelu, layer_norm
from .kernels import TORCH_GELU, TORCH_LAYER_NORM, Kernel


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
