"""Kernels of a loaded autosched library inside a torch model, module by module.

`swap_modules_for_library(model, library)` takes a library loaded once with
`autosched.torch.load_library(DIR)` (each workload is `torch.ops.autosched.<workload>`,
dispatching over shape variants; `library[workload]` is that op) and replaces

* nn.Linear(K -> N) by a module calling a `matmul` kernel with N, K matching
  (x @ W^T, the bias added in torch), and
* nn.LayerNorm(N) by a module calling a `layer_norm` kernel with N matching.

The kernel's row count M must match the flattened input at call time; otherwise, and for
anything the library lacks, torch runs. Backward is computed with torch from the saved
inputs, so training works whether or not the op registers its own autograd. Kernels are
called functionally: `op(*inputs) -> output`. The plan names the records of these ops
with `library.record_ids()`.
"""
from __future__ import annotations

import torch
from torch import nn


class _LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x2d, weight, op):
        ctx.save_for_backward(x2d, weight)
        return op(x2d, weight.t().contiguous())

    @staticmethod
    def backward(ctx, g):
        x2d, weight = ctx.saved_tensors
        return g @ weight, g.t() @ x2d, None


class AutoschedLinear(nn.Module):
    """nn.Linear whose matmul runs an autosched kernel when the row count matches."""

    def __init__(self, linear: nn.Linear, kernel, op):
        super().__init__()
        self.op = op
        self.weight, self.bias = linear.weight, linear.bias
        self.kernel, self.rows = kernel, int(kernel.args["M"])
        self.record_id = kernel.record_id

    def forward(self, x):
        x2d = x.reshape(-1, x.shape[-1])
        if x2d.shape[0] != self.rows:
            return nn.functional.linear(x, self.weight, self.bias)
        y = _LinearFn.apply(x2d, self.weight, self.op)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], y.shape[-1])


class _LayerNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x2d, weight, bias, eps, op):
        ctx.save_for_backward(x2d, weight, bias)
        ctx.eps = eps
        return op(x2d, weight, bias)

    @staticmethod
    def backward(ctx, g):
        x2d, weight, bias = ctx.saved_tensors
        _, mean, rstd = torch.ops.aten.native_layer_norm(x2d, [x2d.shape[-1]], weight, bias,
                                                         ctx.eps)
        gx, gw, gb = torch.ops.aten.native_layer_norm_backward(
            g, x2d, [x2d.shape[-1]], mean, rstd, weight, bias, [True, True, True])
        return gx, gw, gb, None, None


class AutoschedLayerNorm(nn.Module):
    """nn.LayerNorm (affine) running an autosched kernel when the row count matches."""

    def __init__(self, norm: nn.LayerNorm, kernel, op):
        super().__init__()
        self.op = op
        self.weight, self.bias, self.eps = norm.weight, norm.bias, norm.eps
        self.kernel, self.rows = kernel, int(kernel.args["M"])
        self.record_id = kernel.record_id

    def forward(self, x):
        x2d = x.reshape(-1, x.shape[-1])
        if x2d.shape[0] != self.rows:
            return nn.functional.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)
        return _LayerNormFn.apply(x2d, self.weight, self.bias, self.eps,
                                  self.op).reshape(x.shape)


def _match(module: nn.Module, library):
    """The kernel module that replaces `module`, or None (the first kernel that fits)."""
    if isinstance(module, nn.Linear):
        for k in library.entries("matmul"):
            if k.args.get("N") == module.out_features and k.args.get("K") == module.in_features:
                return AutoschedLinear(module, k, library["matmul"])
    if isinstance(module, nn.LayerNorm) and module.elementwise_affine and \
            len(module.normalized_shape) == 1:
        for k in library.entries("layer_norm"):
            if k.args.get("N") == module.normalized_shape[0]:
                return AutoschedLayerNorm(module, k, library["layer_norm"])
    return None


def swap_modules_for_library(model: nn.Module, library) -> dict:
    """Replace matching modules in place; returns {module name: kernel symbol}.
    `library` is what `autosched.torch.load_library(DIR)` returned."""
    swapped = {}
    for parent_name, parent in list(model.named_modules()):
        for child_name, child in list(parent.named_children()):
            repl = _match(child, library)
            if repl is not None:
                setattr(parent, child_name, repl)
                full = f"{parent_name}.{child_name}" if parent_name else child_name
                swapped[full] = repl.kernel.symbol
    return swapped
