"""Kernels behind the memory-efficient GELU and LayerNorm (forward/backward callables).

A kernel is a pair of plain callables on tensors plus an id ("torch" for the reference
implementations here, or the record id of a tuned autosched kernel). `functions.py` wraps a
kernel in a `torch.autograd.Function`; swapping in a faster kernel (a fused, tuned one from
an autosched library) changes nothing else.

GELU (exact or tanh) saves its output y and a 1-byte mask m = [x >= x*], where x* ~ -0.75
is where GELU has its minimum: each branch of GELU is monotone, so (y, m) determine x.
The backward needs gelu'(x). It reads it from one table per branch against the same
coordinate s = sqrt(y - y*): gelu' is linear in s near the minimum on both branches, -> 1
for large y on the right and -> 0 with y on the left; linear interpolation. s costs one
subtraction and one square root (no logarithm), so the fused kernel runs at the speed of
memory. Tolerance (tested): the local derivative is within 5e-6 of gelu'(x) wherever y
resolves x; in fp32 near the minimum (|x - x*| < 0.1) the output rounded to fp32 no longer
resolves x and the error grows to NEAR_MIN_GRAD_ERR (2.9e-4 measured on 2M points
within 0.1 of x*, exact GELU; the information a 4-byte output keeps there; any
output-based backward has it).

LayerNorm saves its output y and 1/std per row. With an affine weight w and bias b the
normalised input is (y - b) / w, so the backward is the native LayerNorm backward fed with
x - mean = (y - b) / (w * rstd) and mean = 0: exact up to rounding. A weight entry of zero
would lose that column; the module then falls back to saving the input (see functions.py).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable

import torch

TABLE_SIZE = 16384
LEFT_X_CUTOFF = -12.0      # gelu(x) > -1e-31 below: y rounds to 0 next to y_min
RIGHT_Y_CUTOFF = 12.0      # gelu'(x) = 1 to 1e-30 above
# The fp32 backward's error bound within 0.1 of x* (see the module doc); 5e-6 elsewhere
NEAR_MIN_GRAD_ERR = 3e-4


@dataclass(frozen=True)
class Kernel:
    """A forward/backward pair with the id recorded in plans ("torch" or a record id)."""

    id: str
    forward: Callable
    backward: Callable


# -- GELU --------------------------------------------------------------------------------
_K_TANH = math.sqrt(2.0 / math.pi)


def _gelu64(x, approximate):
    """GELU in float64 written so the left tail does not cancel to zero (for the tables)."""
    if approximate == "tanh":
        u = _K_TANH * (x + 0.044715 * x ** 3)
        return x * torch.sigmoid(2 * u)                 # 0.5 (1 + tanh u) = sigmoid(2u)
    return x * 0.5 * torch.special.erfc(-x / math.sqrt(2.0))


def _gelu_grad64(x, approximate):
    if approximate == "tanh":
        u = _K_TANH * (x + 0.044715 * x ** 3)
        du = _K_TANH * (1 + 3 * 0.044715 * x * x)
        sig = torch.sigmoid(2 * u)
        return sig + x * 2 * sig * torch.sigmoid(-2 * u) * du
    return 0.5 * torch.special.erfc(-x / math.sqrt(2.0)) + x * torch.exp(-0.5 * x * x) / math.sqrt(
        2 * math.pi)


def _bisect(f, lo, hi, target, increasing, iters=120):
    a, b = torch.full_like(target, lo), torch.full_like(target, hi)
    for _ in range(iters):
        mid = 0.5 * (a + b)
        right = (f(mid) < target) if increasing else (f(mid) > target)
        a, b = torch.where(right, mid, a), torch.where(right, b, mid)
    return 0.5 * (a + b)


@dataclass(frozen=True)
class GeluTables:
    x_min: float          # argmin of GELU
    y_min: float          # GELU(x_min) < 0
    left: torch.Tensor    # gelu' on the left branch at s = i * h_left, s = sqrt(y - y_min)
    right: torch.Tensor   # gelu' on the right branch at s = i * h_right
    h_left: float
    h_right: float


@functools.lru_cache(maxsize=None)
def gelu_tables(approximate: str = "none") -> GeluTables:
    """The float64 tables for one GELU variant (built once, ~0.1 s)."""
    g = functools.partial(_gelu64, approximate=approximate)
    dg = functools.partial(_gelu_grad64, approximate=approximate)
    x_min = _bisect(dg, -2.0, 0.0, torch.zeros(1, dtype=torch.float64), True).item()
    y_min = g(torch.tensor([x_min], dtype=torch.float64)).item()
    n = TABLE_SIZE
    s_left = torch.linspace(0.0, math.sqrt(-y_min), n, dtype=torch.float64)     # y up to 0
    x_left = _bisect(g, LEFT_X_CUTOFF, x_min, s_left * s_left + y_min, False)
    s_right = torch.linspace(0.0, math.sqrt(RIGHT_Y_CUTOFF - y_min), n, dtype=torch.float64)
    x_right = _bisect(g, x_min, RIGHT_Y_CUTOFF + 1, s_right * s_right + y_min, True)
    left, right = dg(x_left), dg(x_right)
    left[0] = right[0] = 0.0            # exactly the minimum
    left[-1] = 0.0                      # y = 0: x -> -inf
    return GeluTables(x_min, y_min, left, right, s_left[1].item(), s_right[1].item())


@functools.lru_cache(maxsize=16)
def device_tables(approximate: str, dtype: torch.dtype, device: str):
    """(table, slope): the left and right derivative tables end to end, and the step to
    each next entry, as `dtype` on `device` (inputs of the fused workload too)."""
    t = gelu_tables(approximate)
    both = torch.cat([t.left, t.right])
    slope = torch.cat([both[1:] - both[:-1], both[:1] * 0])
    return both.to(dtype=dtype, device=device), slope.to(dtype=dtype, device=device)


def gelu_forward(x: torch.Tensor, approximate: str = "none"):
    """(GELU(x), mask) with mask = x >= argmin(GELU), one byte per element."""
    t = gelu_tables(approximate)
    return torch.nn.functional.gelu(x, approximate=approximate), x >= t.x_min


def gelu_backward(grad_y, y, mask, approximate: str = "none"):
    """grad_x from the saved output and mask (table lookup, linear interpolation)."""
    t = gelu_tables(approximate)
    n = TABLE_SIZE
    s = (y - t.y_min).clamp_min_(0).sqrt_()
    pos = s.mul_(torch.where(mask, y.new_tensor(1.0 / t.h_right), y.new_tensor(1.0 / t.h_left)))
    pos.clamp_(max=n - 1)
    i = pos.to(torch.int64).clamp_(max=n - 2)
    frac = pos.sub_(i)
    i.add_(mask, alpha=n)                       # the right branch's table follows the left
    table, slope = device_tables(approximate, y.dtype, str(y.device))
    return grad_y * table.take(i).addcmul_(frac, slope.take(i))


def gelu_grad_reference(grad_y, y, mask, table, slope, approximate: str = "none"):
    """torch reference of the fused `memeff_gelu_grad` workload (workloads.py)."""
    del table, slope  # the same tables, built here from `approximate`
    return gelu_backward(grad_y, y, mask != 0, approximate)


# -- LayerNorm ---------------------------------------------------------------------------
def layer_norm_forward(x, normalized_shape, weight, bias, eps):
    """(y, rstd) with rstd shaped like x's leading dims plus ones (as aten returns it)."""
    y, _mean, rstd = torch.ops.aten.native_layer_norm(x, list(normalized_shape), weight, bias,
                                                      eps)
    return y, rstd


def layer_norm_backward(grad_y, y, rstd, weight, bias, normalized_shape, needs):
    """(grad_x, grad_weight, grad_bias) from the output: x - mean = (y - b) / (w * rstd)."""
    centered = y if bias is None else y - bias
    if weight is not None:
        centered = centered / weight
    centered = centered / rstd
    zeros = torch.zeros_like(rstd)
    gx, gw, gb = torch.ops.aten.native_layer_norm_backward(
        grad_y, centered, list(normalized_shape), zeros, rstd, weight, bias, list(needs))
    return gx, gw, gb


TORCH_GELU = Kernel("torch", gelu_forward, gelu_backward)
TORCH_LAYER_NORM = Kernel("torch", layer_norm_forward, layer_norm_backward)
