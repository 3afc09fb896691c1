"""Use kernels from an exported autosched library inside a torch model (the examples' hook).

`swap_modules_for_library(model, dir)` loads the library with
`autosched.torch.load_library(dir)` (which registers each kernel as
`torch.ops.autosched.<symbol>`), reads `dir/manifest.json`, and replaces

* nn.Linear(K -> N) by a module calling a `matmul` kernel with N, K matching
  (x @ W^T, the bias added in torch), and
* nn.LayerNorm(N) by a module calling a `layer_norm` kernel with N matching.

The kernel's row count M must match the flattened input at call time; otherwise, and for
anything the library lacks, torch runs. Backward is computed with torch from the saved
inputs, so training works whether or not the op registers its own autograd. Kernels are
called functionally: `op(*inputs) -> output`.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from ..errors import UserError


def _load(library_dir) -> list[dict]:
    try:
        from autosched.torch import load_library
    except ImportError:
        raise UserError("kernel_library needs autosched.torch.load_library, which this "
                        "installation does not have") from None
    load_library(str(library_dir))
    try:
        manifest = json.loads((Path(library_dir) / "manifest.json").read_text())
        return list(manifest["kernels"])
    except (OSError, ValueError, KeyError) as e:
        raise UserError(f"{library_dir}: unreadable manifest.json ({e})") from None


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

    def __init__(self, linear: nn.Linear, kernel: dict):
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias
        self.kernel, self.rows = kernel, int(kernel["args"]["M"])
        self.record_id = kernel.get("record_id")

    def forward(self, x):
        x2d = x.reshape(-1, x.shape[-1])
        if x2d.shape[0] != self.rows:
            return nn.functional.linear(x, self.weight, self.bias)
        op = getattr(torch.ops.autosched, self.kernel["symbol"])
        y = _LinearFn.apply(x2d, self.weight, op)
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

    def __init__(self, norm: nn.LayerNorm, kernel: dict):
        super().__init__()
        self.weight, self.bias, self.eps = norm.weight, norm.bias, norm.eps
        self.kernel, self.rows = kernel, int(kernel["args"]["M"])
        self.record_id = kernel.get("record_id")

    def forward(self, x):
        x2d = x.reshape(-1, x.shape[-1])
        if x2d.shape[0] != self.rows:
            return nn.functional.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)
        op = getattr(torch.ops.autosched, self.kernel["symbol"])
        return _LayerNormFn.apply(x2d, self.weight, self.bias, self.eps, op).reshape(x.shape)


def _match(module: nn.Module, kernels: list[dict]):
    for k in kernels:
        args = k.get("args", {})
        if isinstance(module, nn.Linear) and k.get("workload") == "matmul" and \
                args.get("N") == module.out_features and args.get("K") == module.in_features:
            return AutoschedLinear(module, k)
        if isinstance(module, nn.LayerNorm) and module.elementwise_affine and \
                k.get("workload") == "layer_norm" and len(module.normalized_shape) == 1 and \
                args.get("N") == module.normalized_shape[0]:
            return AutoschedLayerNorm(module, k)
    return None


def swap_modules_for_library(model: nn.Module, library_dir) -> dict:
    """Replace matching modules in place; returns {module name: kernel symbol}."""
    kernels = _load(library_dir)
    swapped = {}
    for parent_name, parent in list(model.named_modules()):
        for child_name, child in list(parent.named_children()):
            repl = _match(child, kernels)
            if repl is not None:
                setattr(parent, child_name, repl)
                full = f"{parent_name}.{child_name}" if parent_name else child_name
                swapped[full] = repl.kernel["symbol"]
    return swapped


def record_ids(library_dir) -> dict:
    """{"autosched::<symbol>": record id} from a library's manifest (for plan kernel ids)."""
    try:
        manifest = json.loads((Path(library_dir) / "manifest.json").read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"{library_dir}: unreadable manifest.json ({e})") from None
    return {f"autosched::{k['symbol']}": k.get("record_id") for k in manifest.get("kernels", [])}
