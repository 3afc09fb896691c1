"""The memory-efficient GELU and LayerNorm as torch.library custom ops, for torch.compile.

The autograd Functions of functions.py are what eager plans run. torch.compile would have
to trace into them (and into their kernels' table lookups and the LayerNorm weight check,
which it cannot), so a plan applied for compilation runs these ops instead: opaque to the
compiler, with fake implementations that give it the output shapes, and registered
autograd whose setup_context saves exactly what the Functions save (GELU: output + 1-byte
mask; LayerNorm: output + 1/std per row). AOTAutograd then keeps those tensors for
backward, and the compiled graph's saved bytes are the eager form's.

The ops name their kernel by id (a schema takes strings, not callables): `kernel_id(kind,
k)` enters a Kernel in this module's table and returns the id the op is called with. It
runs when a module is built, never while torch.compile traces (dynamo defers a traced
dict write until after the graph, which the op inside that graph would miss).

    autosched_memeff::gelu(x, approximate, kernel) -> (y, mask)
    autosched_memeff::gelu_backward(grad_y, y, mask, approximate, kernel) -> grad_x
    autosched_memeff::layer_norm(x, normalized_shape, weight?, bias?, eps, kernel) -> (y, rstd)
    autosched_memeff::layer_norm_backward(grad_y, y, rstd, weight?, bias?, normalized_shape,
                                          needs, kernel) -> (grad_x, grad_w, grad_b)

The namespace is not `autosched`: that one holds exported library kernels, which the
tracer reports as the plan's kernels and selective checkpointing counts as compute-heavy.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .functions import weight_invertible
from .kernels import Kernel

NAMESPACE = "autosched_memeff"
_KERNELS: dict[str, dict[str, Kernel]] = {"gelu": {}, "layer_norm": {}}


def kernel_id(kind: str, kernel: Kernel) -> str:
    """Enter `kernel` ("gelu" or "layer_norm") in the ops' table and return its id."""
    known = _KERNELS[kind].setdefault(kernel.id, kernel)
    if known is not kernel and known != kernel:
        raise ValueError(f"two different {kind} kernels share the id {kernel.id!r}")
    return kernel.id


# The ops return contiguous tensors, and their fake implementations say so: the compiled
# graph checks the real outputs' strides against the fakes', and a kernel's output layout
# may follow its input's (an elementwise GELU on a transposed tensor) or not (LayerNorm).
def _dense(*tensors: Tensor) -> tuple[Tensor, ...]:
    return tuple(t.contiguous() for t in tensors)


def _empty(like: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    return like.new_empty(like.shape, dtype=dtype or like.dtype)


# -- GELU ----------------------------------------------------------------------------------
@torch.library.custom_op(f"{NAMESPACE}::gelu", mutates_args=())
def gelu_op(x: Tensor, approximate: str, kernel: str) -> tuple[Tensor, Tensor]:
    return _dense(*_KERNELS["gelu"][kernel].forward(x, approximate))


@gelu_op.register_fake
def _gelu_fake(x, approximate, kernel):
    return _empty(x), _empty(x, torch.bool)


@torch.library.custom_op(f"{NAMESPACE}::gelu_backward", mutates_args=())
def gelu_backward_op(grad_y: Tensor, y: Tensor, mask: Tensor, approximate: str,
                     kernel: str) -> Tensor:
    return _dense(_KERNELS["gelu"][kernel].backward(grad_y, y, mask, approximate))[0]


@gelu_backward_op.register_fake
def _gelu_backward_fake(grad_y, y, mask, approximate, kernel):
    return _empty(y)


def _gelu_setup(ctx, inputs, output):
    _, ctx.approximate, ctx.kernel = inputs
    ctx.save_for_backward(*output)
    ctx.mark_non_differentiable(output[1])


def _gelu_grad(ctx, grad_y, _grad_mask):
    y, mask = ctx.saved_tensors
    return gelu_backward_op(grad_y, y, mask, ctx.approximate, ctx.kernel), None, None


gelu_op.register_autograd(_gelu_grad, setup_context=_gelu_setup)


# -- LayerNorm -----------------------------------------------------------------------------
@torch.library.custom_op(f"{NAMESPACE}::layer_norm", mutates_args=())
def layer_norm_op(x: Tensor, normalized_shape: list[int], weight: Tensor | None,
                  bias: Tensor | None, eps: float, kernel: str) -> tuple[Tensor, Tensor]:
    if weight is not None and not weight_invertible(weight):
        # The compiled graph saves y, not x; with a zero weight entry x is lost. Eager
        # plans fall back to the standard LayerNorm here (functions.layer_norm).
        raise RuntimeError("memory-efficient LayerNorm under torch.compile needs a weight "
                           "without exact zeros (the input cannot be rebuilt from the "
                           "output); apply the plan without compile=True for this model")
    return _dense(*_KERNELS["layer_norm"][kernel].forward(x, normalized_shape, weight, bias,
                                                          eps))


@layer_norm_op.register_fake
def _layer_norm_fake(x, normalized_shape, weight, bias, eps, kernel):
    k = len(normalized_shape)
    stat = torch.empty(tuple(x.shape[:x.dim() - k]) + (1,) * k, dtype=_stat_dtype(x),
                       device=x.device)
    return _empty(x), stat


def _stat_dtype(x):
    # aten.native_layer_norm keeps 1/std in fp32 for half inputs on every backend.
    return torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype


@torch.library.custom_op(f"{NAMESPACE}::layer_norm_backward", mutates_args=())
def layer_norm_backward_op(grad_y: Tensor, y: Tensor, rstd: Tensor, weight: Tensor | None,
                           bias: Tensor | None, normalized_shape: list[int],
                           needs: list[bool], kernel: str) -> tuple[Tensor, Tensor, Tensor]:
    gx, gw, gb = _KERNELS["layer_norm"][kernel].backward(grad_y, y, rstd, weight, bias, normalized_shape,
                                           needs)
    # A schema cannot return None: a gradient nobody asked for comes back empty.
    empty = grad_y.new_empty(0)
    return _dense(gx if gx is not None else torch.zeros_like(y),
                  gw if gw is not None else empty, gb if gb is not None else empty)


@layer_norm_backward_op.register_fake
def _layer_norm_backward_fake(grad_y, y, rstd, weight, bias, normalized_shape, needs, kernel):
    empty = grad_y.new_empty(0)
    return (_empty(y), _empty(weight) if weight is not None and needs[1] else empty,
            _empty(bias) if bias is not None and needs[2] else empty)


def _layer_norm_setup(ctx, inputs, output):
    _, ctx.normalized_shape, weight, bias, _, ctx.kernel = inputs
    ctx.save_for_backward(output[0], output[1], weight, bias)
    ctx.mark_non_differentiable(output[1])


def _layer_norm_grad(ctx, grad_y, _grad_rstd):
    y, rstd, weight, bias = ctx.saved_tensors
    needs = [ctx.needs_input_grad[0], weight is not None and ctx.needs_input_grad[2],
             bias is not None and ctx.needs_input_grad[3]]
    gx, gw, gb = layer_norm_backward_op(grad_y, y, rstd, weight, bias, ctx.normalized_shape,
                                        needs, ctx.kernel)
    return (gx, None, gw if needs[1] else None, gb if needs[2] else None, None, None)


layer_norm_op.register_autograd(_layer_norm_grad, setup_context=_layer_norm_setup)


def gelu(x, approximate: str, kernel: str):
    """The memory-efficient GELU through the custom op; `kernel` from kernel_id."""
    return gelu_op(x, approximate, kernel)[0]


def layer_norm(x, normalized_shape, weight, bias, eps, kernel: str):
    """The memory-efficient LayerNorm through the custom op; `kernel` from kernel_id."""
    return layer_norm_op(x, list(normalized_shape), weight, bias, eps, kernel)[0]
